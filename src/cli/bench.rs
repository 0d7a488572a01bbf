//! `ken bench ...`: indexing, query, vector, model, watcher and context
//! latency; JSON, or text where a person reads it.

use anyhow::Result;

use super::args::BenchCommand;
use super::{render, Place};
use crate::bench;
use crate::embed::projection::Precision;

/// `ken bench WHAT`.
pub(super) fn bench(at: &Place, what: BenchCommand) -> Result<i32> {
    match what {
        BenchCommand::Query {
            iterations,
            questions,
            json,
        } => query(at, iterations, questions.as_deref(), json),
        BenchCommand::Vectors {
            count,
            dimensions,
            quantization,
        } => vectors(count, dimensions, &quantization),
        BenchCommand::Embed {
            chunks,
            budgets,
            precisions,
        } => {
            let precisions = match &precisions[..] {
                [] => {
                    let mut both = vec![Precision::F32];
                    both.extend((Precision::fastest() == Precision::Bf16).then_some(Precision::Bf16));
                    both
                }
                named => named.iter().map(|p| p.parse()).collect::<Result<Vec<Precision>>>()?,
            };
            let (root, index_dir) = at.read()?;
            print_json(&bench::embed(&root, &index_dir, chunks, &budgets, &precisions)?)
        }
        BenchCommand::Watch {
            files,
            edits,
            differing,
            idle_seconds,
            debounce_ms,
            embed,
        } => print_json(&bench::watch::run(&bench::watch::WatchBenchOptions {
            files,
            edits,
            differing,
            idle_seconds,
            debounce_ms,
            embed,
        })?),
        BenchCommand::Context { samples, budget } => {
            let (root, index_dir) = at.read()?;
            print_json(&bench::context::symbol_context(&root, &index_dir, samples, budget)?)
        }
        BenchCommand::Impact { iterations } => {
            let (root, index_dir) = at.read()?;
            println!("{}", bench::context::change_impact(&root, &index_dir, iterations)?);
            Ok(0)
        }
        BenchCommand::FirstRun {
            source,
            baseline_exe,
            query,
            adapter_timeout_secs,
        } => print_json(&bench::first_run::run(&bench::first_run::FirstRunOptions {
            source,
            baseline: baseline_exe,
            query,
            adapter_timeout: std::time::Duration::from_secs(adapter_timeout_secs),
        })?),
        BenchCommand::Serve {
            questions,
            spawns,
            limit,
            pause_ms,
            baseline_exe,
            via_service,
        } => {
            let (root, index_dir) = at.read()?;
            let questions = questions.map(|file| bench::read_questions(&file)).transpose()?;
            print_json(&bench::serve::run(&bench::serve::ServeBenchOptions {
                root,
                index_dir,
                questions,
                spawns,
                limit,
                pause: std::time::Duration::from_millis(pause_ms),
                baseline: baseline_exe,
                via_service,
            })?)
        }
        BenchCommand::Index {
            root,
            queries,
            iterations,
            json,
        } => {
            let report = bench::run(&bench::BenchOptions {
                root,
                queries,
                iterations,
            })?;
            if json {
                print_json(&report)
            } else {
                print!("{}", report.render());
                Ok(0)
            }
        }
    }
}

/// `ken bench query`: each search mode's latency on the existing index.
fn query(at: &Place, iterations: usize, questions: Option<&std::path::Path>, json: bool) -> Result<i32> {
    let (root, index_dir) = at.read()?;
    let questions = match questions {
        Some(file) => bench::read_questions(file)?,
        None => Vec::new(),
    };
    let report = bench::query(&root, &index_dir, iterations, &questions)?;
    if json {
        print_json(&report)
    } else {
        print!("{}", render::query_bench(&report, iterations));
        Ok(0)
    }
}

/// `ken bench vectors`: HNSW against an exact scan on clustered vectors.
fn vectors(count: usize, dimensions: usize, quantization: &str) -> Result<i32> {
    let q = match quantization {
        "f32" => crate::store::vectors::Quantization::F32,
        "f16" => crate::store::vectors::Quantization::F16,
        "i8" => crate::store::vectors::Quantization::I8,
        other => anyhow::bail!("--quantization {other}: expected f32, f16 or i8"),
    };
    print_json(&bench::vectors(count, dimensions, q)?)
}

/// A bench's numbers as pretty JSON on stdout.
fn print_json(report: &impl serde::Serialize) -> Result<i32> {
    println!("{}", serde_json::to_string_pretty(report)?);
    Ok(0)
}
