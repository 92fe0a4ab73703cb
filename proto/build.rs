//! Generates the baton.v1 Rust code into OUT_DIR with the vendored protoc (no
//! system protoc needed), and writes the file descriptor set that the services
//! serve for reflection.

use std::{env, path::PathBuf};

const PROTOS: [&str; 7] = [
    "baton/v1/context_store.proto",
    "baton/v1/evals.proto",
    "baton/v1/events.proto",
    "baton/v1/orchestrator.proto",
    "baton/v1/tool_host.proto",
    "baton/v1/webhooks.proto",
    // The Agent2Agent protocol (vendored; see the file's header).
    "lf/a2a/v1/a2a.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    for f in PROTOS {
        println!("cargo:rerun-if-changed={f}");
    }
    println!("cargo:rerun-if-env-changed=PROTOC");

    let out = PathBuf::from(env::var("OUT_DIR")?);
    let mut config = tonic_prost_build::Config::new();
    // A PROTOC from the environment wins; otherwise the one inside the crate.
    let protoc = match env::var_os("PROTOC") {
        Some(p) => PathBuf::from(p),
        None => protoc_bin_vendored::protoc_bin_path()?,
    };
    config.protoc_executable(protoc);
    let well_known = protoc_bin_vendored::include_path()?;
    let includes = [PathBuf::from("."), well_known];
    let protos: Vec<PathBuf> = PROTOS.iter().map(PathBuf::from).collect();
    // Timestamp and Duration are this crate's (`wkt`): the same wire form
    // as prost_types', with the proto3 JSON mapping.
    let descriptors = out.join("baton_descriptor.bin");
    tonic_prost_build::configure()
        .file_descriptor_set_path(&descriptors)
        // Messages decoded from one slice (see `codec`).
        .codec_path("crate::codec::Codec")
        .extern_path(".google.protobuf.Timestamp", "crate::wkt::Timestamp")
        .extern_path(".google.protobuf.Duration", "crate::wkt::Duration")
        // A2A's Struct and Value: this crate's (`json_value`), with their JSON
        // mapping and a deterministic encoding.
        .extern_path(".google.protobuf.Struct", "crate::json_value::Struct")
        .extern_path(".google.protobuf.Value", "crate::json_value::Value")
        .extern_path(".google.protobuf.ListValue", "crate::json_value::ListValue")
        .compile_with_config(config, &protos, &includes)?;
    // serde for every baton.v1 message, following the proto3 JSON mapping
    // (the HTTP face's JSON).
    let set = std::fs::read(&descriptors)?;
    pbjson_build::Builder::new()
        .register_descriptors(&set)?
        .extern_path(".google.protobuf.Timestamp", "crate::wkt::Timestamp")
        .extern_path(".google.protobuf.Duration", "crate::wkt::Duration")
        .build(&[".baton"])?;
    // A2A's JSON: fields a newer peer sends that this version does not know
    // are ignored (A2A §5.7: implementations SHOULD ignore them).
    pbjson_build::Builder::new()
        .register_descriptors(&set)?
        .extern_path(".google.protobuf.Timestamp", "crate::wkt::Timestamp")
        .extern_path(".google.protobuf.Struct", "crate::json_value::Struct")
        .extern_path(".google.protobuf.Value", "crate::json_value::Value")
        .ignore_unknown_fields()
        .build(&[".lf.a2a"])?;
    Ok(())
}
