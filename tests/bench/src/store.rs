//! The context-store benchmark (see the crate docs).

use std::{
    process::Command,
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::Context;
use baton_client::{StoreClient, pb};
use baton_context_store::config::{Backend, Config};
use baton_e2e::RedisServer;
use baton_proto::v1::context_store_server::{ContextStore as ContextStoreRpc, ContextStoreServer};
use baton_store::{ContextStore, redis::RedisStore};
use hdrhistogram::Histogram;
use redis::aio::ConnectionManager;
use tokio::runtime::Runtime;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};

/// What to measure.
#[derive(clap::Args)]
pub struct Options {
    /// Measured operations per row (after a warm-up).
    #[arg(long, default_value_t = 50_000)]
    ops: usize,
    /// Calls in flight for the concurrent rows.
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// gRPC connections the concurrent client spreads its calls over.
    #[arg(long, default_value_t = 4)]
    channels: usize,
    /// Worker threads of the server runtime, as the store's
    /// `worker_threads` config: 1 (its default) is a current-thread runtime,
    /// 0 one worker per core.
    #[arg(long, default_value_t = 1)]
    server_threads: usize,
    /// redis-benchmark requests per test.
    #[arg(long, default_value_t = 200_000)]
    redis_requests: usize,
}

const VALUE: usize = 1024;
const KEYS_PER_TRACE: usize = 512;

struct Row {
    name: String,
    p50_us: f64,
    p99_us: f64,
    ops_per_sec: f64,
}

pub fn run(o: Options) -> anyhow::Result<()> {
    let redis = RedisServer::start()?;
    eprintln!("redis-server on port {}", redis.port());

    // Servers run on their own runtime in their own thread, built the way
    // the binary builds its runtime.
    let shutdown = CancellationToken::new();
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    let server_thread = {
        let shutdown = shutdown.clone();
        let url = redis.url();
        let threads = o.server_threads;
        std::thread::spawn(move || -> anyhow::Result<()> {
            let rt = baton_common::runtime::build(threads)?;
            rt.block_on(async {
                let addrs = start_servers(&url, shutdown.clone()).await;
                let _ = addr_tx.send(addrs);
                shutdown.cancelled().await;
            });
            rt.shutdown_timeout(Duration::from_secs(5));
            Ok(())
        })
    };
    let [store_addr, floor_addr, echo_addr] = addr_rx.recv().context("server thread died")??;

    // The client is a current-thread runtime: on two cores every cross-thread
    // hop costs more than the work (STACK.md), so the load generator stays
    // out of the server's way.
    let client_rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let traces: Vec<String> = (0..o.concurrency.max(1))
        .map(|_| baton_common::ids::TraceId::random().to_string())
        .collect();

    let mut rows = Vec::new();
    for (label, addr) in [
        ("baton store", store_addr),
        ("floor: bare tonic + 1 Redis GET", floor_addr),
        ("floor: bare tonic, no Redis", echo_addr),
    ] {
        let clients = client_rt.block_on(connect(&format!("http://{addr}"), o.channels))?;
        client_rt.block_on(seed(&clients[0], &traces))?;
        for (op, conc) in [
            (Op::Get, 1),
            (Op::Put, 1),
            (Op::Get, o.concurrency),
            (Op::Put, o.concurrency),
        ] {
            if label.starts_with("floor") && op == Op::Put {
                continue;
            }
            let (p50, p99, rate) = measure(&client_rt, &clients, &traces, op, conc, o.ops)?;
            rows.push(Row {
                name: format!("{label:<32} {op:?} c={conc}"),
                p50_us: p50,
                p99_us: p99,
                ops_per_sec: rate,
            });
        }
    }

    let rb1 = redis_benchmark(redis.port(), 1, o.redis_requests)?;
    let rb50 = redis_benchmark(redis.port(), 50, o.redis_requests)?;
    for (c, set) in [(1, &rb1), (50, &rb50)] {
        for (test, p50_ms, p99_ms, rps) in set {
            rows.push(Row {
                name: format!("{:<32} {test} c={c}", "redis-benchmark -d 1024"),
                p50_us: p50_ms * 1000.0,
                p99_us: p99_ms * 1000.0,
                ops_per_sec: *rps,
            });
        }
    }

    println!(
        "\n{:<48} {:>10} {:>10} {:>12}",
        "what", "p50 µs", "p99 µs", "ops/s"
    );
    for r in &rows {
        println!(
            "{:<48} {:>10.1} {:>10.1} {:>12.0}",
            r.name, r.p50_us, r.p99_us, r.ops_per_sec
        );
    }

    let find = |prefix: &str| {
        rows.iter()
            .find(|r| r.name.starts_with(prefix) || r.name.contains(prefix))
    };
    let get1 = find("baton store                      Get c=1").context("row")?;
    let get64 = find(&format!(
        "baton store                      Get c={}",
        o.concurrency
    ))
    .context("row")?;
    let floor1 = find("floor: bare tonic + 1 Redis GET  Get c=1").context("row")?;
    let floor64 = find(&format!(
        "floor: bare tonic + 1 Redis GET  Get c={}",
        o.concurrency
    ))
    .context("row")?;
    let rget1 = find("redis-benchmark -d 1024          GET c=1").context("row")?;
    let rget50 = find("redis-benchmark -d 1024          GET c=50").context("row")?;
    println!();
    println!(
        "Get c=1 p50 vs redis-benchmark GET p50: {:.2}x (target <= 3x)   vs bare floor: {:.2}x",
        get1.p50_us / rget1.p50_us,
        get1.p50_us / floor1.p50_us
    );
    println!(
        "Get c={} throughput vs redis-benchmark GET -c 50: {:.0}% (target >= 40%)   vs bare floor: {:.0}%",
        o.concurrency,
        100.0 * get64.ops_per_sec / rget50.ops_per_sec,
        100.0 * get64.ops_per_sec / floor64.ops_per_sec
    );

    shutdown.cancel();
    drop(client_rt);
    server_thread
        .join()
        .map_err(|_| anyhow::anyhow!("server thread panicked"))??;
    Ok(())
}

async fn start_servers(
    redis_url: &str,
    shutdown: CancellationToken,
) -> anyhow::Result<[std::net::SocketAddr; 3]> {
    let mut config = Config {
        backend: Backend::Redis,
        ..Config::default()
    };
    config.redis.url = redis_url.to_owned();
    config.telemetry.metrics_listen = String::new();
    let store: Arc<dyn ContextStore> =
        Arc::new(RedisStore::new(&config.redis, config.limits.clone())?);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let store_addr = listener.local_addr()?;
    let s = shutdown.clone();
    tokio::spawn(async move { baton_context_store::serve(store, &config, listener, s).await });

    let conn = ConnectionManager::new(redis::Client::open(redis_url)?).await?;
    let floor_addr = serve_floor(Floor { conn: Some(conn) }, shutdown.clone()).await?;
    let echo_addr = serve_floor(Floor { conn: None }, shutdown).await?;
    Ok([store_addr, floor_addr, echo_addr])
}

async fn serve_floor(
    floor: Floor,
    shutdown: CancellationToken,
) -> anyhow::Result<std::net::SocketAddr> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(ContextStoreServer::new(floor))
            .serve_with_incoming_shutdown(
                tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
                shutdown.cancelled_owned(),
            ),
    );
    Ok(addr)
}

async fn connect(endpoint: &str, channels: usize) -> anyhow::Result<Vec<StoreClient>> {
    let mut out = Vec::new();
    for _ in 0..channels.max(1) {
        out.push(StoreClient::connect(endpoint.to_owned()).await?);
    }
    Ok(out)
}

async fn seed(client: &StoreClient, traces: &[String]) -> anyhow::Result<()> {
    for t in traces {
        for k in 0..KEYS_PER_TRACE {
            client.put(t, &format!("k{k}"), vec![b'v'; VALUE]).await?;
        }
    }
    Ok(())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Get,
    Put,
}

/// Runs `ops` calls with `conc` in flight; returns (p50 µs, p99 µs, ops/s).
fn measure(
    rt: &Runtime,
    clients: &[StoreClient],
    traces: &[String],
    op: Op,
    conc: usize,
    ops: usize,
) -> anyhow::Result<(f64, f64, f64)> {
    let per_task = ops.div_ceil(conc);
    let warmup = (per_task / 10).max(10);
    rt.block_on(async {
        let started = Instant::now();
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..conc {
            let client = clients[i % clients.len()].clone();
            let trace = traces[i % traces.len()].clone();
            tasks.spawn(async move {
                let mut hist =
                    Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("histogram bounds");
                let value = vec![b'x'; VALUE];
                let mut measured_from = None;
                for j in 0..warmup + per_task {
                    if j == warmup {
                        measured_from = Some(Instant::now());
                    }
                    let key = format!("k{}", (i * 7 + j) % KEYS_PER_TRACE);
                    let t0 = Instant::now();
                    match op {
                        Op::Get => {
                            client.get(&trace, &key).await?;
                        }
                        Op::Put => {
                            client.put(&trace, &key, value.clone()).await?;
                        }
                    }
                    if j >= warmup {
                        hist.record(t0.elapsed().as_micros().max(1) as u64)
                            .expect("in bounds");
                    }
                }
                Ok::<_, anyhow::Error>((hist, measured_from))
            });
        }
        let mut total =
            Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("histogram bounds");
        let mut first = None::<Instant>;
        while let Some(r) = tasks.join_next().await {
            let (h, from) = r.context("bench task")??;
            total.add(&h).expect("same bounds");
            if let Some(f) = from {
                first = Some(first.map_or(f, |x: Instant| x.min(f)));
            }
        }
        let elapsed = first.unwrap_or(started).elapsed();
        Ok((
            total.value_at_quantile(0.5) as f64,
            total.value_at_quantile(0.99) as f64,
            total.len() as f64 / elapsed.as_secs_f64(),
        ))
    })
}

/// Runs redis-benchmark; returns (test, p50 ms, p99 ms, requests/s) rows.
fn redis_benchmark(
    port: u16,
    clients: usize,
    requests: usize,
) -> anyhow::Result<Vec<(String, f64, f64, f64)>> {
    let out = Command::new("redis-benchmark")
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-t",
            "set,get",
            "-d",
            "1024",
            "--csv",
        ])
        .args(["-c", &clients.to_string(), "-n", &requests.to_string()])
        .output()
        .context("cannot run redis-benchmark (apt-get install redis-tools)")?;
    anyhow::ensure!(
        out.status.success(),
        "redis-benchmark failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout)?;
    let mut rows = Vec::new();
    for line in text.lines().skip(1) {
        let f: Vec<String> = line
            .split(',')
            .map(|s| s.trim_matches('"').to_owned())
            .collect();
        anyhow::ensure!(f.len() >= 7, "unexpected redis-benchmark line {line:?}");
        rows.push((f[0].clone(), f[4].parse()?, f[6].parse()?, f[1].parse()?));
    }
    Ok(rows)
}

/// A bare tonic handler doing one Redis GET: the floor of any gRPC service in
/// front of Redis.
struct Floor {
    /// `None`: answer from memory, to show what the gRPC hop alone costs.
    conn: Option<ConnectionManager>,
}

#[tonic::async_trait]
impl ContextStoreRpc for Floor {
    async fn get(
        &self,
        request: Request<pb::GetRequest>,
    ) -> Result<Response<pb::GetResponse>, Status> {
        let r = request.into_inner();
        let Some(conn) = &self.conn else {
            return Ok(Response::new(pb::GetResponse {
                slot: None,
                value: vec![b'v'; VALUE],
            }));
        };
        let value: Option<Vec<u8>> = redis::cmd("GET")
            .arg(format!("floor:{}:{}", r.trace_id, r.key))
            .query_async(&mut conn.clone())
            .await
            .map_err(|e| Status::unavailable(e.to_string()))?;
        Ok(Response::new(pb::GetResponse {
            slot: None,
            value: value.unwrap_or_default(),
        }))
    }

    async fn put(
        &self,
        request: Request<pb::PutRequest>,
    ) -> Result<Response<pb::PutResponse>, Status> {
        let r = request.into_inner();
        let Some(conn) = &self.conn else {
            return Ok(Response::new(pb::PutResponse::default()));
        };
        let _: () = redis::cmd("SET")
            .arg(format!("floor:{}:{}", r.trace_id, r.key))
            .arg(r.value)
            .query_async(&mut conn.clone())
            .await
            .map_err(|e| Status::unavailable(e.to_string()))?;
        Ok(Response::new(pb::PutResponse::default()))
    }

    async fn list(
        &self,
        _: Request<pb::ListRequest>,
    ) -> Result<Response<pb::ListResponse>, Status> {
        Err(Status::unimplemented("floor"))
    }

    async fn delete(
        &self,
        _: Request<pb::DeleteRequest>,
    ) -> Result<Response<pb::DeleteResponse>, Status> {
        Err(Status::unimplemented("floor"))
    }

    async fn clear(
        &self,
        _: Request<pb::ClearRequest>,
    ) -> Result<Response<pb::ClearResponse>, Status> {
        Err(Status::unimplemented("floor"))
    }

    async fn put_many(
        &self,
        _: Request<pb::PutManyRequest>,
    ) -> Result<Response<pb::PutManyResponse>, Status> {
        Err(Status::unimplemented("floor"))
    }

    async fn delete_many(
        &self,
        _: Request<pb::DeleteManyRequest>,
    ) -> Result<Response<pb::DeleteManyResponse>, Status> {
        Err(Status::unimplemented("floor"))
    }

    type WatchStream = futures::stream::Empty<Result<pb::WatchResponse, Status>>;

    async fn watch(
        &self,
        _: Request<pb::WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        Err(Status::unimplemented("floor"))
    }
}
