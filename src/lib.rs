//! ken: fast, private, precise code search for coding agents.
//!
//! The modules follow the pipeline, and each imports only the stages before
//! it (ARCHITECTURE.md states the rules):
//! [`source`] reads files into chunks and graph rows, [`store`] keeps them in
//! SQLite, [`embed`] turns text into vectors, [`graph`] resolves calls,
//! [`index`] keeps the store in step with the working tree, [`search`]
//! answers queries, [`context`] assembles answers for agents, [`bench`]
//! measures them, [`app`] holds what both front ends do, and the front ends
//! [`serve`] (MCP) and [`cli`] sit on top.

// Functions stay short enough to read at once (the limit is in clippy.toml).
#![cfg_attr(not(test), warn(clippy::too_many_lines))]

pub mod app;
pub mod bench;
pub mod cli;
pub mod config;
pub mod context;
pub mod embed;
pub mod graph;
pub mod index;
pub mod search;
pub mod serve;
pub mod source;
pub mod store;
