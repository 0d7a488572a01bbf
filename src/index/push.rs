//! `ken engine push`: this repository's indexed chunks and vectors, from
//! the local index to the shared engine (docs/scale.md), incrementally by
//! file content hash, in one transaction per repository.

use std::path::Path;

use anyhow::{bail, Result};

use crate::source::{git, lexical};
use crate::store::engine::{tsvector_literal, Engine, EngineChunk, EngineFile, RepoPush};
use crate::store::pushed::PushedChunk;
use crate::store::{MetaKey, Store};

/// What one push did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PushReport {
    pub repo: String,
    pub branch: String,
    /// Files written (new or changed), and their chunks.
    pub files_written: usize,
    pub chunks_written: u64,
    /// Files whose rows went (deleted from the branch).
    pub files_removed: usize,
    pub files_unchanged: usize,
    /// The embedder of the pushed vectors (`None`: lexical only).
    pub embedder: Option<String>,
    /// Every row was rewritten: the engine held another embedder's vectors.
    pub replaced_all: bool,
}

/// Pushes the current branch of `root`'s index (in `index_dir`) to
/// `engine` as repository `repo`. Refuses an index whose embedding pass has
/// not finished: a file pushed without its vectors would keep lacking them
/// (pushes skip unchanged files).
pub fn push(root: &Path, index_dir: &Path, engine: &mut Engine, repo: &str) -> Result<PushReport> {
    crate::store::engine::check_repo_name(repo)?;
    let store = Store::open_for_read(index_dir)?;
    let head = git::head(root);
    let branch = head.catalog_key();
    if !store.has_catalog(Some(&branch))? {
        bail!("the index has no files for the current branch `{branch}`; run `ken index` first");
    }
    let _snapshot = store.read_snapshot()?;
    let model = store.meta(MetaKey::EmbeddingModel)?;
    let embedder = match &model {
        Some(model) => {
            let missing = store.branch_contents_without_vectors(&branch, model)?;
            if missing > 0 {
                bail!(
                    "{missing} chunks of `{branch}` have no vectors yet; wait for `ken index` to finish \
                     embedding (`ken status`), then push"
                );
            }
            let dimensions = store.meta_parsed::<usize>(MetaKey::EmbeddingDimensions)?.unwrap_or(0);
            Some((model.clone(), dimensions))
        }
        None => None,
    };
    engine.ensure_schema()?;
    let pushed = engine.pushed(repo)?;
    let replace_all = !pushed.files.is_empty() && pushed.embedder != model;
    let catalog = store.catalog(&branch)?;
    let mut report = PushReport {
        repo: repo.to_string(),
        branch: branch.clone(),
        embedder: model.clone(),
        replaced_all: replace_all,
        ..Default::default()
    };
    let removed: Vec<String> = pushed
        .files
        .keys()
        .filter(|path| !catalog.contains_key(*path))
        .cloned()
        .collect();
    let mut files = Vec::new();
    let mut paths: Vec<&String> = catalog.keys().collect();
    paths.sort();
    for path in paths {
        let entry = catalog[path];
        if !replace_all && pushed.files.get(path) == Some(&entry.content_hash) {
            report.files_unchanged += 1;
            continue;
        }
        files.push(engine_file(
            &store,
            path,
            entry.file_id,
            entry.content_hash,
            model.as_deref(),
        )?);
    }
    report.files_written = files.len();
    report.files_removed = removed.len();
    let push = RepoPush {
        repo: repo.to_string(),
        branch,
        head: head.commit,
        embedder,
        replace_all,
        removed,
        files,
    };
    report.chunks_written = engine.push(&push)?;
    Ok(report)
}

/// One file version's chunks as the engine stores them, with ken's lexical
/// terms (as the local index's FTS columns have them) and vectors.
fn engine_file(store: &Store, path: &str, file_id: i64, file_hash: i64, model: Option<&str>) -> Result<EngineFile> {
    let mut path_terms = String::new();
    lexical::index_terms(path, &mut path_terms);
    let signature_model = model.map(crate::embed::text::signature_model);
    let chunks = store
        .pushed_chunks(file_id, model, signature_model.as_deref())?
        .into_iter()
        .map(|pushed| {
            let signatures = signatures_of(&pushed, model.is_some());
            let mut symbol_terms = String::new();
            for name in &pushed.names {
                lexical::index_terms(name, &mut symbol_terms);
            }
            let mut body_terms = String::new();
            if let Some(context) = &pushed.chunk.context {
                lexical::index_terms(context, &mut body_terms);
            }
            lexical::index_terms(&pushed.chunk.text, &mut body_terms);
            let length = [&symbol_terms, &path_terms, &body_terms]
                .iter()
                .map(|terms| terms.split(' ').filter(|t| !t.is_empty()).count())
                .sum();
            EngineChunk {
                chunk: pushed.chunk,
                length,
                terms: tsvector_literal(&symbol_terms, &path_terms, &body_terms),
                vector: pushed.vector.as_deref().map(crate::store::vectors::decode),
                signatures,
            }
        })
        .collect();
    Ok(EngineFile {
        path: path.to_string(),
        file_hash,
        language: store.file_language(file_id)?,
        chunks,
    })
}

/// A pushed chunk's signature vectors, one per name: none for a chunk that
/// gets none ([`signature_texts`] has no text for it) or without vectors at
/// all; `None` while the index has not embedded them yet.
///
/// [`signature_texts`]: crate::embed::text::signature_texts
fn signatures_of(pushed: &PushedChunk, with_vectors: bool) -> Option<Vec<Vec<f32>>> {
    let chunk = &pushed.chunk;
    let named = !crate::embed::text::signature_texts(
        chunk.context.as_deref(),
        chunk.symbol.as_deref(),
        &chunk.kind,
        &chunk.text,
        &[],
    )
    .is_empty();
    if !with_vectors || !named {
        return Some(Vec::new());
    }
    let vectors = crate::store::vectors::decode(pushed.signatures.as_deref()?);
    let dimensions = pushed.vector.as_ref().map_or(vectors.len(), |v| v.len() / 4).max(1);
    Some(vectors.chunks_exact(dimensions).map(<[f32]>::to_vec).collect())
}
