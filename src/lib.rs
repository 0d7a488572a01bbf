//! ken: fast, private, precise code search for coding agents.
//!
//! Data flows one way: [`discover`] finds files, [`chunk`] cuts them into
//! chunks using the grammars in [`lang`], [`index`] stores them through
//! [`store`] (with [`lexical`] terms), and [`search`] answers queries.
//! [`cli`] is the command line on top. See ARCHITECTURE.md for the map.

pub mod adapter;
pub mod bench;
pub mod bert;
pub mod bm25;
pub mod chunk;
pub mod cli;
pub mod confidence;
pub mod config;
pub mod context;
pub mod discover;
pub mod embed;
pub mod freshness;
pub mod git;
pub mod graph;
pub mod health;
pub mod http;
pub mod index;
pub mod kb;
pub mod lang;
pub mod lexical;
pub mod logs;
pub mod mcp;
pub mod metrics;
pub mod model;
pub mod progress;
pub mod provider;
pub mod search;
pub mod semantic;
pub mod status;
pub mod store;
pub mod vectors;
pub mod watch;
pub mod watch_bench;

/// The environment setting `name`; a blank one is unset (`KEN_X=` in a
/// shell or a client's config turns a setting off, not to "").
pub fn setting(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}
