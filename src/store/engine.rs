//! The shared search engine: a PostgreSQL server with pgvector, which many
//! repositories push their chunks and vectors to and agents search across
//! (docs/scale.md). This file is the only one that speaks its SQL, as the
//! rest of `store/` is for SQLite's.
//!
//! One table holds every repository's chunks: the text, a `tsvector` of
//! ken's own lexical terms (symbol names weigh A, the path B, the body D;
//! PostgreSQL's parsers split identifiers badly, so terms come pre-made as a
//! literal), and the vector with the id of the embedder that made it. Each
//! embedder id has its own partial HNSW index (cosine), so vectors of
//! different embedders are never compared.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use postgres::{Client, Config, NoTls};

use super::pushed::ChunkText;

/// How long connecting may take before the engine counts as down.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// How long one statement may run: a search waits no longer for the engine.
const STATEMENT_TIMEOUT_MS: u64 = 10_000;
/// How long one statement of a push may run.
const PUSH_STATEMENT_TIMEOUT_MS: u64 = 30 * 60 * 1000;
/// tsvector positions stop here (PostgreSQL's limit).
const MAX_POSITION: usize = 16_383;

const SCHEMA: &str = "
CREATE EXTENSION IF NOT EXISTS vector;
CREATE TABLE IF NOT EXISTS ken_repos (
    repo TEXT PRIMARY KEY,
    branch TEXT NOT NULL,
    head TEXT,
    embedder TEXT,
    dimensions INTEGER,
    chunks BIGINT NOT NULL,
    terms BIGINT NOT NULL,
    pushed_at TIMESTAMPTZ NOT NULL DEFAULT now());
CREATE TABLE IF NOT EXISTS ken_chunks (
    id BIGSERIAL PRIMARY KEY,
    repo TEXT NOT NULL,
    path TEXT NOT NULL,
    file_hash BIGINT NOT NULL,
    language TEXT NOT NULL,
    kind TEXT NOT NULL,
    symbol TEXT,
    context TEXT,
    start_line INTEGER NOT NULL,
    end_line INTEGER NOT NULL,
    text TEXT NOT NULL,
    terms TSVECTOR NOT NULL,
    length INTEGER NOT NULL,
    embedder TEXT,
    embedding VECTOR,
    side_by_side SMALLINT,
    signatures VECTOR[]);
-- Rows pushed before them have none: their files are pushed again.
ALTER TABLE ken_chunks ADD COLUMN IF NOT EXISTS side_by_side SMALLINT;
ALTER TABLE ken_chunks ADD COLUMN IF NOT EXISTS signatures VECTOR[];
CREATE INDEX IF NOT EXISTS ken_chunks_file ON ken_chunks (repo, path);
-- The lexical side's inverted index: each term of a chunk with its
-- field-weighted frequency and the chunk's length (BM25 reads nothing else),
-- derived from `terms` at push. Scoring a query reads only its terms' rows;
-- over the tsvector it unnested every matching chunk's terms (a question's
-- statement 17 ms against 395).
CREATE TABLE IF NOT EXISTS ken_postings (
    term TEXT NOT NULL,
    chunk_id BIGINT NOT NULL,
    tf REAL NOT NULL,
    length INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS ken_postings_term ON ken_postings (term) INCLUDE (chunk_id, tf, length);
CREATE INDEX IF NOT EXISTS ken_postings_chunk ON ken_postings (chunk_id);
DROP INDEX IF EXISTS ken_chunks_terms;
-- Repositories pushed before the postings have none until pushed again.
ALTER TABLE ken_repos ADD COLUMN IF NOT EXISTS postings BOOLEAN NOT NULL DEFAULT false;
";

/// The version of [`SCHEMA`], which the engine records as a comment on
/// `ken_chunks`. Raise it with every change of `SCHEMA` (a test pins the
/// text to it): a ken that finds a lower version runs `SCHEMA`; one that
/// finds its own or a higher one runs no DDL, so a search never queues for
/// the locks `ALTER TABLE` and `CREATE INDEX` take before they look, and an
/// older ken leaves a newer schema alone.
const SCHEMA_VERSION: i32 = 4;

/// The version the engine's schema is at; 0 when it has none or predates
/// the versions.
const SCHEMA_VERSION_FOUND: &str = "
SELECT coalesce(substring(obj_description(to_regclass('ken_chunks'), 'pg_class')
                          from '^ken schema ([0-9]+)$')::integer, 0)
";

fn schema_version_found(client: &mut impl postgres::GenericClient) -> Result<i32> {
    Ok(client.query_one(SCHEMA_VERSION_FOUND, &[])?.get(0))
}

/// A connection to the engine.
pub struct Engine {
    client: Client,
}

/// One chunk as pushed.
pub struct EngineChunk {
    pub chunk: ChunkText,
    /// Lexical terms of the symbol names, the path and the body ([`tsvector_literal`]).
    pub terms: String,
    /// How many terms (BM25's document length).
    pub length: usize,
    pub vector: Option<Vec<f32>>,
    /// Its signature vectors (`semantic::signature_texts`): none for a chunk
    /// without a name; `None` while the index has not embedded them yet
    /// (the row is written without, and its file pushed again next time).
    pub signatures: Option<Vec<Vec<f32>>>,
}

/// One file's chunks as pushed.
pub struct EngineFile {
    pub path: String,
    pub file_hash: i64,
    pub language: String,
    pub chunks: Vec<EngineChunk>,
}

/// What one push writes for a repository, in one transaction.
pub struct RepoPush {
    pub repo: String,
    pub branch: String,
    pub head: Option<String>,
    /// The embedder id and dimensions of the vectors.
    pub embedder: Option<(String, usize)>,
    /// Every row of the repository goes first (another embedder's vectors).
    pub replace_all: bool,
    /// Paths whose rows go (deleted or changed files).
    pub removed: Vec<String>,
    /// Files whose rows are written (new or changed).
    pub files: Vec<EngineFile>,
}

/// What the engine holds of a repository.
pub struct PushedRepo {
    pub embedder: Option<String>,
    /// Path → content hash of the file version pushed.
    pub files: HashMap<String, i64>,
}

/// A chunk as a search reads it back.
#[derive(Debug, Clone)]
pub struct EngineRow {
    pub id: i64,
    pub repo: String,
    pub path: String,
    pub language: String,
    pub kind: String,
    pub symbol: Option<String>,
    pub context: Option<String>,
    pub start_line: u32,
    pub end_line: u32,
    pub text: String,
    /// Cosine similarity to the query vector, when the row has a vector of its embedder.
    pub similarity: Option<f32>,
    /// The nearest of its signature vectors' similarities to the query vector, when it has any.
    pub signature_similarity: Option<f32>,
    /// How many definitions it holds side by side ([`super::pushed::ChunkText::side_by_side`]).
    pub side_by_side: u32,
}

/// What [`Engine::term_frequencies`] tells of a query's terms.
pub struct TermStats {
    pub chunks: u64,
    pub mean_length: f64,
    /// Chunks holding each term, in order.
    pub counts: Vec<u64>,
}

/// BM25's parameters and the mean chunk length.
#[derive(Debug, Clone, Copy)]
pub struct Bm25 {
    pub k1: f64,
    pub b: f64,
    pub mean_length: f64,
}

/// The query vector of a search and the embedder that made it.
pub struct QueryEmbedding<'a> {
    pub embedder: &'a str,
    pub vector: &'a [f32],
}

impl Engine {
    /// Connects to `url` (a PostgreSQL URL or key=value string); `password`,
    /// when given, overrides the URL's. Errors never repeat the URL (it may
    /// hold a password).
    pub fn connect(url: &str, password: Option<&str>) -> Result<Engine> {
        let mut config: Config = url
            .parse()
            .map_err(|_| anyhow::anyhow!("the engine URL is not a PostgreSQL connection string"))?;
        config.connect_timeout(CONNECT_TIMEOUT);
        if let Some(password) = password {
            config.password(password);
        }
        let where_ = describe(&config);
        // The client's timeout covers the TCP connect only: a server that
        // accepts and never answers would hang the handshake, so the whole
        // connect is bounded here (a stuck attempt's thread is left behind).
        let (sender, receiver) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = sender.send(config.connect(NoTls));
        });
        let mut client = match receiver.recv_timeout(CONNECT_TIMEOUT + Duration::from_secs(1)) {
            Ok(connected) => connected.with_context(|| format!("cannot reach the search engine at {where_}"))?,
            Err(_) => bail!(
                "cannot reach the search engine at {where_}: no answer within {} s",
                CONNECT_TIMEOUT.as_secs() + 1
            ),
        };
        client
            .batch_execute(&format!("SET statement_timeout = {STATEMENT_TIMEOUT_MS}"))
            .context("the search engine refused its session settings")?;
        Ok(Engine { client })
    }

    /// Creates the tables and the extension if missing, or brings them up
    /// to date ([`SCHEMA_VERSION`]). When they are current this only reads
    /// the catalog.
    pub fn ensure_schema(&mut self) -> Result<()> {
        if schema_version_found(&mut self.client)? >= SCHEMA_VERSION {
            return Ok(());
        }
        // Two first pushes at once would race on CREATE: one at a time, and
        // the second finds the first's work done.
        let mut tx = self.client.transaction()?;
        tx.batch_execute("SELECT pg_advisory_xact_lock(7301)")?;
        if schema_version_found(&mut tx)? < SCHEMA_VERSION {
            tx.batch_execute(SCHEMA)
                .context("cannot create ken's tables in the engine (is pgvector installed?)")?;
            tx.batch_execute(&format!("COMMENT ON TABLE ken_chunks IS 'ken schema {SCHEMA_VERSION}'"))?;
        }
        tx.commit()?;
        Ok(())
    }

    /// What the engine holds of `repo`.
    pub fn pushed(&mut self, repo: &str) -> Result<PushedRepo> {
        let embedder = self
            .client
            .query_opt("SELECT embedder FROM ken_repos WHERE repo = $1", &[&repo])?
            .and_then(|row| row.get::<_, Option<String>>(0));
        let files = self
            .client
            .query(
                "SELECT path, file_hash FROM ken_chunks WHERE repo = $1 GROUP BY path, file_hash
                 HAVING bool_and(side_by_side IS NOT NULL AND signatures IS NOT NULL)",
                &[&repo],
            )?
            .into_iter()
            .map(|row| (row.get(0), row.get(1)))
            .collect();
        Ok(PushedRepo { embedder, files })
    }

    /// Writes `push` in one transaction: a reader sees the repository as it
    /// was or as pushed, never half. Pushes of one repository queue.
    pub fn push(&mut self, push: &RepoPush) -> Result<u64> {
        let mut tx = self.client.transaction()?;
        // A first push writes every chunk into the HNSW and GIN indexes: a
        // CI job's minutes, not a search's seconds.
        tx.batch_execute(&format!("SET LOCAL statement_timeout = {PUSH_STATEMENT_TIMEOUT_MS}"))?;
        tx.execute("SELECT pg_advisory_xact_lock(hashtext($1))", &[&push.repo])?;
        // A repository without postings (pushed by an earlier ken) gets
        // them for every chunk it has, not only those written now.
        let has_postings: bool = tx
            .query_opt("SELECT postings FROM ken_repos WHERE repo = $1", &[&push.repo])?
            .is_some_and(|row| row.get(0));
        if push.replace_all || !has_postings {
            tx.execute(
                "DELETE FROM ken_postings p USING ken_chunks c WHERE c.id = p.chunk_id AND c.repo = $1",
                &[&push.repo],
            )?;
        }
        if push.replace_all {
            tx.execute("DELETE FROM ken_chunks WHERE repo = $1", &[&push.repo])?;
        }
        let changed: Vec<&str> = push
            .removed
            .iter()
            .map(String::as_str)
            .chain(push.files.iter().map(|f| f.path.as_str()))
            .collect();
        tx.execute(
            "DELETE FROM ken_postings p USING ken_chunks c
             WHERE c.id = p.chunk_id AND c.repo = $1 AND c.path = ANY($2)",
            &[&push.repo, &changed],
        )?;
        tx.execute(
            "DELETE FROM ken_chunks WHERE repo = $1 AND path = ANY($2)",
            &[&push.repo, &changed],
        )?;
        let written = copy_chunks(&mut tx, push)?;
        let written_paths: Vec<&str> = push.files.iter().map(|f| f.path.as_str()).collect();
        // A term's frequency counts an occurrence in a definition's name 6
        // times, in the path twice, as the local index's column weights do.
        tx.execute(
            "INSERT INTO ken_postings (term, chunk_id, tf, length)
             SELECT u.lexeme, c.id,
                    (SELECT sum(CASE w WHEN 'A' THEN 6 WHEN 'B' THEN 2 ELSE 1 END) FROM unnest(u.weights) AS w),
                    c.length
             FROM ken_chunks c CROSS JOIN LATERAL unnest(c.terms) AS u(lexeme, positions, weights)
             WHERE c.repo = $1 AND ($3 OR c.path = ANY($2))",
            &[&push.repo, &written_paths, &!has_postings],
        )?;
        if let Some((id, dimensions)) = &push.embedder {
            tx.batch_execute(&hnsw_index_sql(id, *dimensions))?;
        }
        let (embedder, dimensions) = match &push.embedder {
            Some((id, d)) => (Some(id.as_str()), Some(*d as i32)),
            None => (None, None),
        };
        tx.execute(
            "INSERT INTO ken_repos (repo, branch, head, embedder, dimensions, chunks, terms, postings)
             SELECT $1, $2, $3, $4, $5, count(*), coalesce(sum(length), 0), true FROM ken_chunks WHERE repo = $1
             ON CONFLICT (repo) DO UPDATE SET branch = $2, head = $3, embedder = $4, dimensions = $5,
                 chunks = EXCLUDED.chunks, terms = EXCLUDED.terms, postings = true, pushed_at = now()",
            &[&push.repo, &push.branch, &push.head, &embedder, &dimensions],
        )?;
        tx.commit().context("the engine did not commit the push")?;
        Ok(written)
    }

    /// The embedder with the most pushed chunks, and its dimensions: the one
    /// a search embeds its query with.
    pub fn main_embedder(&mut self) -> Result<Option<(String, usize)>> {
        Ok(self
            .client
            .query_opt(
                "SELECT embedder, dimensions FROM ken_repos WHERE embedder IS NOT NULL
                 GROUP BY embedder, dimensions ORDER BY sum(chunks) DESC LIMIT 1",
                &[],
            )?
            .map(|row| (row.get(0), row.get::<_, i32>(1) as usize)))
    }

    /// The term statistics of a query: every pushed chunk, their mean
    /// length, and how many contain each of `terms`.
    pub fn term_frequencies(&mut self, terms: &[String]) -> Result<TermStats> {
        let row = self.client.query_one(
            "SELECT coalesce(sum(chunks), 0)::BIGINT, coalesce(sum(terms), 0)::BIGINT FROM ken_repos",
            &[],
        )?;
        let (total, lengths): (i64, i64) = (row.get(0), row.get(1));
        let found: HashMap<String, i64> = self
            .client
            .query(
                "SELECT term, count(*) FROM ken_postings WHERE term = ANY($1) GROUP BY term",
                &[&terms],
            )?
            .into_iter()
            .map(|row| (row.get(0), row.get(1)))
            .collect();
        let counts = terms
            .iter()
            .map(|term| found.get(term).copied().unwrap_or(0) as u64)
            .collect();
        Ok(TermStats {
            chunks: total as u64,
            mean_length: lengths as f64 / total.max(1) as f64,
            counts,
        })
    }

    /// The best `depth` chunks holding any of the `matched` terms, by BM25
    /// over every `scored` term (with its IDF), from the postings.
    pub fn lexical(
        &mut self,
        matched: &[String],
        scored: &[(String, f64)],
        stats: Bm25,
        depth: usize,
    ) -> Result<Vec<(i64, f64)>> {
        if matched.is_empty() {
            return Ok(Vec::new());
        }
        let terms: Vec<&str> = scored.iter().map(|(t, _)| t.as_str()).collect();
        let idfs: Vec<f64> = scored.iter().map(|(_, idf)| *idf).collect();
        let (k1, b) = (stats.k1, stats.b);
        let rows = self.client.query(
            &format!(
                "SELECT p.chunk_id, sum(q.idf * p.tf * ({k1} + 1) / (p.tf + {k1} * (1 - {b} + {b} * p.length / $4::FLOAT8)))::FLOAT8 AS score
                 FROM ken_postings p JOIN unnest($1::text[], $2::float8[]) AS q(term, idf) ON q.term = p.term
                 GROUP BY p.chunk_id HAVING bool_or(p.term = ANY($3))
                 ORDER BY score DESC, p.chunk_id LIMIT $5"
            ),
            &[&terms, &idfs, &matched, &stats.mean_length.max(1.0), &(depth as i64)],
        )?;
        Ok(rows.into_iter().map(|r| (r.get(0), r.get(1))).collect())
    }

    /// The repositories pushed by a ken that wrote no postings: the lexical
    /// side does not see them until they are pushed again.
    pub fn repos_without_postings(&mut self) -> Result<Vec<String>> {
        Ok(self
            .client
            .query("SELECT repo FROM ken_repos WHERE NOT postings ORDER BY repo", &[])?
            .into_iter()
            .map(|row| row.get(0))
            .collect())
    }

    /// The `k` chunks nearest `query` among those of its embedder, by the
    /// embedder's HNSW index: (id, cosine similarity).
    pub fn nearest(&mut self, query: &QueryEmbedding, k: usize) -> Result<Vec<(i64, f32)>> {
        self.nearest_by(query, k, true)
    }

    /// The same by an exact scan (the HNSW index's recall is measured against it).
    pub fn nearest_exact(&mut self, query: &QueryEmbedding, k: usize) -> Result<Vec<(i64, f32)>> {
        self.nearest_by(query, k, false)
    }

    fn nearest_by(&mut self, query: &QueryEmbedding, k: usize, hnsw: bool) -> Result<Vec<(i64, f32)>> {
        let d = query.vector.len();
        let mut tx = self.client.transaction()?;
        // HNSW returns at most ef_search rows; an exact scan is the planner's
        // choice once index scans are off.
        tx.batch_execute(&format!("SET LOCAL hnsw.ef_search = {}", k.clamp(40, 1000)))?;
        if !hnsw {
            tx.batch_execute("SET LOCAL enable_indexscan = off")?;
        }
        let rows = tx.query(
            &format!(
                "SELECT id, (1 - (embedding::vector({d}) <=> $1::text::vector({d})))::FLOAT4 FROM ken_chunks
                 WHERE embedder = {} ORDER BY embedding::vector({d}) <=> $1::text::vector({d}) LIMIT $2",
                sql_literal(query.embedder)
            ),
            &[&vector_literal(query.vector), &(k as i64)],
        )?;
        tx.commit()?;
        Ok(rows.into_iter().map(|r| (r.get(0), r.get(1))).collect())
    }

    /// The chunks `ids`, each with its similarity to `query` when it has a
    /// vector of the query's embedder.
    pub fn rows(&mut self, ids: &[i64], query: Option<&QueryEmbedding>) -> Result<Vec<EngineRow>> {
        let (similarity, signature_similarity) = match query {
            Some(q) => (similarity_sql(q), signature_similarity_sql(q)),
            None => ("NULL::FLOAT4".to_string(), "NULL::FLOAT4".to_string()),
        };
        let rows = self.client.query(
            &format!(
                "SELECT id, repo, path, language, kind, symbol, context, start_line, end_line, text, {similarity},
                        side_by_side, {signature_similarity}
                 FROM ken_chunks WHERE id = ANY($1)"
            ),
            &[&ids],
        )?;
        Ok(rows
            .into_iter()
            .map(|r| EngineRow {
                id: r.get(0),
                repo: r.get(1),
                path: r.get(2),
                language: r.get(3),
                kind: r.get(4),
                symbol: r.get(5),
                context: r.get(6),
                start_line: r.get::<_, i32>(7) as u32,
                end_line: r.get::<_, i32>(8) as u32,
                text: r.get(9),
                similarity: r.get(10),
                side_by_side: r.get::<_, Option<i16>>(11).unwrap_or(1).max(1) as u32,
                signature_similarity: r.get(12),
            })
            .collect())
    }

    /// The similarity to `query` of each of the chunks `ids` that has a vector of its embedder.
    pub fn similarities(&mut self, ids: &[i64], query: &QueryEmbedding) -> Result<Vec<(i64, f32)>> {
        let rows = self.client.query(
            &format!(
                "SELECT id, {} FROM ken_chunks WHERE id = ANY($1) AND embedder = $2",
                similarity_sql(query)
            ),
            &[&ids, &query.embedder],
        )?;
        Ok(rows
            .into_iter()
            .filter_map(|r| Some((r.get(0), r.get::<_, Option<f32>>(1)?)))
            .collect())
    }

    /// The vectors of `embedder` of those of the chunks `ids` that have one.
    pub fn vectors_of(&mut self, ids: &[i64], embedder: &str) -> Result<HashMap<i64, Vec<f32>>> {
        let rows = self.client.query(
            "SELECT id, embedding::text FROM ken_chunks WHERE id = ANY($1) AND embedder = $2",
            &[&ids, &embedder],
        )?;
        let mut vectors = HashMap::with_capacity(rows.len());
        for row in rows {
            let text: String = row.get(1);
            let vector = parse_vector_literal(&text)
                .with_context(|| format!("the engine sent a malformed vector: {text:.40}"))?;
            vectors.insert(row.get(0), vector);
        }
        Ok(vectors)
    }
}

/// Writes the push's chunks with COPY (text format), the fastest way in.
fn copy_chunks(tx: &mut postgres::Transaction, push: &RepoPush) -> Result<u64> {
    let embedder = push.embedder.as_ref().map(|(id, _)| id.as_str());
    let mut writer = tx.copy_in(
        "COPY ken_chunks (repo, path, file_hash, language, kind, symbol, context, start_line, end_line, \
         text, terms, length, embedder, embedding, side_by_side, signatures) FROM STDIN",
    )?;
    let mut line = String::new();
    let mut written = 0u64;
    for file in &push.files {
        for pushed in &file.chunks {
            let chunk = &pushed.chunk;
            line.clear();
            let vector = pushed.vector.as_deref().map(vector_literal);
            let length = pushed.length.to_string();
            let side_by_side = chunk.side_by_side.min(i16::MAX as u32).to_string();
            let signatures = pushed.signatures.as_deref().map(vector_array_literal);
            let fields: [Option<&str>; 16] = [
                Some(&push.repo),
                Some(&file.path),
                Some(&file.file_hash.to_string()),
                Some(&file.language),
                Some(&chunk.kind),
                chunk.symbol.as_deref(),
                chunk.context.as_deref(),
                Some(&chunk.start_line.to_string()),
                Some(&chunk.end_line.to_string()),
                Some(&chunk.text),
                Some(&pushed.terms),
                Some(&length),
                vector.as_ref().and(embedder),
                vector.as_deref(),
                Some(&side_by_side),
                signatures.as_deref(),
            ];
            for (i, field) in fields.iter().enumerate() {
                if i > 0 {
                    line.push('\t');
                }
                match field {
                    Some(value) => push_copy_escaped(&mut line, value),
                    None => line.push_str("\\N"),
                }
            }
            line.push('\n');
            writer.write_all(line.as_bytes())?;
            written += 1;
        }
    }
    writer.finish().context("the engine refused the pushed chunks")?;
    Ok(written)
}

/// COPY's text format: backslash, tab and line ends escaped; NUL (which
/// PostgreSQL's text cannot hold) dropped.
fn push_copy_escaped(out: &mut String, value: &str) {
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\0' => {}
            c => out.push(c),
        }
    }
}

/// The partial HNSW index of one embedder's vectors (cosine distance).
fn hnsw_index_sql(embedder: &str, dimensions: usize) -> String {
    let name = format!("ken_hnsw_{:016x}", xxhash_rust::xxh3::xxh3_64(embedder.as_bytes()));
    format!(
        "CREATE INDEX IF NOT EXISTS {name} ON ken_chunks USING hnsw ((embedding::vector({dimensions})) \
         vector_cosine_ops) WHERE embedder = {}",
        sql_literal(embedder)
    )
}

/// `value` as an SQL string literal.
fn sql_literal(value: &str) -> String {
    format!("'{}'", value.replace('\'', "''"))
}

/// SQL for the cosine similarity of a row's vector to `query`'s (NULL for another embedder's).
fn similarity_sql(query: &QueryEmbedding) -> String {
    similarity_to(query, |cosine| cosine("embedding"))
}

/// The same for the nearest of a row's signature vectors (NULL without any).
fn signature_similarity_sql(query: &QueryEmbedding) -> String {
    similarity_to(query, |cosine| {
        format!("(SELECT max({}) FROM unnest(signatures) s)", cosine("s"))
    })
}

/// `of(cosine)` for the rows of `query`'s embedder, `cosine(column)` being
/// the SQL of a vector column's cosine similarity to the query's.
fn similarity_to(query: &QueryEmbedding, of: impl Fn(&dyn Fn(&str) -> String) -> String) -> String {
    let d = query.vector.len();
    let target = sql_literal(&vector_literal(query.vector));
    let cosine = |column: &str| format!("(1 - ({column}::vector({d}) <=> {target}::vector({d})))");
    format!(
        "CASE WHEN embedder = {} THEN {}::FLOAT4 END",
        sql_literal(query.embedder),
        of(&cosine)
    )
}

/// An array of vectors in PostgreSQL's array text form (`{"[1,2]","[3,4]"}`).
fn vector_array_literal(vectors: &[Vec<f32>]) -> String {
    let items: Vec<String> = vectors.iter().map(|v| format!("\"{}\"", vector_literal(v))).collect();
    format!("{{{}}}", items.join(","))
}

/// A vector from pgvector's text form (`[0.1,-2,3e-5]`); `None` if it is not one.
fn parse_vector_literal(text: &str) -> Option<Vec<f32>> {
    let inner = text.trim().strip_prefix('[')?.strip_suffix(']')?;
    if inner.trim().is_empty() {
        return Some(Vec::new());
    }
    inner.split(',').map(|x| x.trim().parse::<f32>().ok()).collect()
}

/// pgvector's text form of a vector.
pub fn vector_literal(vector: &[f32]) -> String {
    let mut out = String::with_capacity(vector.len() * 10);
    out.push('[');
    for (i, x) in vector.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(out, "{x}");
    }
    out.push(']');
    out
}

/// One lexeme quoted for the tsvector/tsquery input syntax.
fn quoted_lexeme(term: &str) -> String {
    format!("'{}'", term.replace('\\', "\\\\").replace('\'', "''"))
}

/// A tsvector literal of ken's terms: each field's space-separated terms
/// (symbol names, path, body) with their positions and the field's weight,
/// so PostgreSQL's parser never re-splits them.
pub fn tsvector_literal(symbol_terms: &str, path_terms: &str, body_terms: &str) -> String {
    let mut positions: HashMap<&str, Vec<(usize, char)>> = HashMap::new();
    let mut order: Vec<&str> = Vec::new();
    let mut at = 0usize;
    for (terms, weight) in [(symbol_terms, 'A'), (path_terms, 'B'), (body_terms, 'D')] {
        for term in terms.split(' ').filter(|t| !t.is_empty()) {
            at = (at + 1).min(MAX_POSITION);
            let seen = positions.entry(term).or_insert_with(|| {
                order.push(term);
                Vec::new()
            });
            // PostgreSQL keeps 256 positions per lexeme.
            if seen.len() < 256 {
                seen.push((at, weight));
            }
        }
    }
    let mut out = String::new();
    for term in order {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(&quoted_lexeme(term));
        out.push(':');
        for (i, (position, weight)) in positions[term].iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let _ = write!(out, "{position}");
            if *weight != 'D' {
                out.push(*weight);
            }
        }
    }
    out
}

/// Host, port and database of `config`, for messages (never the password).
fn describe(config: &Config) -> String {
    let host = config
        .get_hosts()
        .first()
        .map(|h| match h {
            postgres::config::Host::Tcp(name) => name.clone(),
            postgres::config::Host::Unix(path) => path.display().to_string(),
        })
        .unwrap_or_else(|| "localhost".into());
    let port = config.get_ports().first().copied().unwrap_or(5432);
    format!("{host}:{port}/{}", config.get_dbname().unwrap_or("-"))
}

/// Refuses a repository name that could not be told apart in results.
pub fn check_repo_name(name: &str) -> Result<()> {
    if name.is_empty() || name.len() > 200 || name.chars().any(|c| c.is_control() || c == ':') {
        bail!("`{name}` cannot name a repository in the engine: 1 to 200 characters, no `:` or control characters");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_of_the_schema_raises_its_version() {
        // When `SCHEMA` changes, raise `SCHEMA_VERSION` and write both here:
        // an engine at the old version would otherwise never get the change.
        let fingerprint = xxhash_rust::xxh3::xxh3_64(SCHEMA.as_bytes());
        assert_eq!(
            (SCHEMA_VERSION, fingerprint),
            (4, 0x86e4_425a_d56d_e9fd),
            "{fingerprint:#018x}"
        );
    }

    #[test]
    fn tsvector_literal_keeps_terms_whole_with_field_weights() {
        let literal = tsvector_literal("parse config", "src config rs", "it's parse");
        assert_eq!(literal, "'parse':1A,7 'config':2A,4B 'src':3B 'rs':5B 'it''s':6");
    }

    #[test]
    fn vectors_read_back_from_pgvector_text_as_written() {
        let vector = [0.25f32, -1.5, 3.0e-5, 7.0];
        assert_eq!(parse_vector_literal(&vector_literal(&vector)), Some(vector.to_vec()));
        assert_eq!(parse_vector_literal("[1, -2.5]"), Some(vec![1.0, -2.5]));
        assert_eq!(parse_vector_literal("[]"), Some(Vec::new()));
        assert_eq!(parse_vector_literal("[1,x]"), None);
        assert_eq!(parse_vector_literal("1,2"), None);
    }

    #[test]
    fn copy_escaping_keeps_tabs_and_lines_apart() {
        let mut out = String::new();
        push_copy_escaped(&mut out, "a\tb\nc\\d\0");
        assert_eq!(out, "a\\tb\\nc\\\\d");
    }
}
