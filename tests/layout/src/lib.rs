//! The shape of every crate of the workspace, checked by
//! `tests/layout.rs`: for each crate of each member the root `Cargo.toml`
//! lists,
//!
//! - no import cycle between files (a file is a module; `mod.rs`, `lib.rs`
//!   and `main.rs` are their directory's module, or the crate's);
//! - no import cycle between modules: at every directory module (the crate
//!   root, named `crate`, included), each child module collapsed to its
//!   subtree, the directory module itself one more node;
//! - no source file under `src/` over [`MAX_LINES`] lines, its
//!   `#[cfg(test)]` modules not counted.
//!
//! Dependencies are read from the source ([`lex`]): every `use` tree and
//! every path naming `crate::`, `super::`, `self::` or a child module,
//! outside `#[cfg(test)]` modules, resolved to the deepest module file it
//! names ([`model::resolve`]). A `mod child;` declaration is not a
//! dependency; a `pub use child::X` is, and so is a module's use of an
//! ancestor (`crate::CONST`).
//!
//! No dependencies, so it builds in seconds whatever the state of the
//! other crates.

pub mod check;
pub mod graph;
pub mod lex;
pub mod model;
pub mod workspace;

pub use check::{Findings, MAX_LINES, check};
