//! Free loopback ports: the OS picks one, the caller binds it (nothing here
//! uses a fixed port).

use anyhow::Context;

/// A loopback address with a port free at the time of the call (for
/// listeners a service binds itself, such as its metrics endpoint).
pub fn free_addr() -> std::io::Result<std::net::SocketAddr> {
    std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()
}

/// A free loopback port (the OS picks one; we release it for the child).
pub fn free_port() -> anyhow::Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").context("cannot bind a loopback port")?;
    Ok(l.local_addr()?.port())
}
