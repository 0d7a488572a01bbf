//! Times callers, callees and path queries on an indexed folder:
//! `cargo run --release --example graph_timing -- <root> [ids-file]`.
//! The sampled symbol ids are written to (or read back from) `ids-file`, so
//! runs before and after a change time the same symbols. Samples are the
//! definitions of the most common names (`get`, `register`, `__init__`...)
//! plus symbols spread over the index like `ken bench index` picks them.

use std::path::PathBuf;
use std::time::Instant;

use ken::graph::query::{Direction, Graph};
use ken::store::Store;

fn stats(name: &str, values: &mut [f64]) {
    values.sort_by(f64::total_cmp);
    let at = |p: f64| values[((values.len() - 1) as f64 * p).round() as usize];
    println!(
        "{name:<14} n={:<3} p50 {:>9.2} ms  p95 {:>9.2} ms  max {:>9.2} ms",
        values.len(),
        at(0.5),
        at(0.95),
        values[values.len() - 1]
    );
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let root = PathBuf::from(args.get(1).map_or("/tmp/bench/big", String::as_str));
    let ids_file = PathBuf::from(args.get(2).map_or("/tmp/graph_timing_ids.txt", String::as_str));
    let store = Store::open_for_read(&root.join(".ken"))?;
    let ids: Vec<i64> = match std::fs::read_to_string(&ids_file) {
        Ok(text) => text.split_whitespace().map(|t| t.parse().unwrap()).collect(),
        Err(_) => {
            let mut ids: Vec<i64> = Vec::new();
            for name in ["get", "register", "__init__", "new", "run", "add"] {
                ids.extend(store.sampled_symbol_named(name).ok().flatten());
            }
            let spread = store.sampled_symbols(50)?;
            for id in spread {
                if ids.len() < 50 && !ids.contains(&id) {
                    ids.push(id);
                }
            }
            std::fs::write(
                &ids_file,
                ids.iter().map(|i| i.to_string()).collect::<Vec<_>>().join("\n"),
            )?;
            ids
        }
    };
    let mut graph = Graph::open(&store, &root)?;
    let symbols: Vec<_> = ids.iter().filter_map(|&id| graph.symbol(id).ok().flatten()).collect();
    let (mut callers, mut callees, mut paths) = (Vec::new(), Vec::new(), Vec::new());
    let verbose = std::env::var("VERBOSE").is_ok();
    for (i, s) in symbols.iter().enumerate() {
        let mut graph = Graph::open(&store, &root)?;
        let t = Instant::now();
        let cg = graph.call_graph(s, Direction::Callers, 1)?;
        let ms_callers = t.elapsed().as_secs_f64() * 1e3;
        callers.push(ms_callers);
        let mut graph = Graph::open(&store, &root)?;
        let t = Instant::now();
        let ce = graph.call_graph(s, Direction::Callees, 1)?;
        let ms_callees = t.elapsed().as_secs_f64() * 1e3;
        callees.push(ms_callees);
        let to = &symbols[(i + 1) % symbols.len()];
        let mut graph = Graph::open(&store, &root)?;
        let t = Instant::now();
        let p = graph.path(s, to)?;
        let ms_path = t.elapsed().as_secs_f64() * 1e3;
        paths.push(ms_path);
        if verbose {
            println!(
                "{:>8} {:<24} callers {:>9.2} ms ({} edges{})  callees {:>9.2} ms ({} edges)  path {:>9.2} ms ({} hops)",
                s.id,
                s.qualified(),
                ms_callers,
                cg.edges.len(),
                if cg.truncated { ", truncated" } else { "" },
                ms_callees,
                ce.edges.len(),
                ms_path,
                p.edges.len()
            );
        }
    }
    println!("{} symbols of {}", symbols.len(), root.display());
    stats("callers", &mut callers);
    stats("callees", &mut callees);
    stats("path", &mut paths);
    Ok(())
}
