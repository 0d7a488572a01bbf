//! The reads a search makes per query: the best lexical matches, which of
//! them a branch and its filters let through, the rows of the chunks to
//! rank, their texts and positions. Statements are cached on the
//! connection, so a search that calls these per candidate prepares each once.

use anyhow::{Context, Result};
use rusqlite::functions::FunctionFlags;
use rusqlite::types::Value;
use rusqlite::{params, params_from_iter, OptionalExtension};

use super::bm25::{docsize_total, MatchScores, RowLengths};
use super::Store;

/// Whether a path passes a search's path filter.
pub type PathPredicate = Box<dyn Fn(&str) -> bool + Send + 'static>;

/// The path filter `ken_path_matches` applies: set per search, the function
/// registered once per connection (registering again would expire every
/// statement the connection has prepared).
pub(super) type PathFilterSlot = std::sync::Arc<std::sync::Mutex<Option<PathPredicate>>>;

/// Registers `ken_path_matches(path)` on `conn`: whether `path` passes the
/// filter last set in the returned slot (every path while it is `None`).
pub(super) fn register_path_matches(conn: &rusqlite::Connection) -> Result<PathFilterSlot> {
    let slot = PathFilterSlot::default();
    let matches = slot.clone();
    // Deterministic within a statement's run, which is all SQLite assumes
    // here: the filter changes only between searches.
    conn.create_scalar_function(
        "ken_path_matches",
        1,
        FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DETERMINISTIC,
        move |ctx| {
            let path = ctx
                .get_raw(0)
                .as_str()
                .map_err(|e| rusqlite::Error::UserFunctionError(e.into()))?;
            let matches = matches.lock().unwrap_or_else(|e| e.into_inner());
            Ok(matches.as_ref().is_none_or(|m| m(path)))
        },
    )?;
    Ok(slot)
}

/// Which chunks a search may return: those of `branch`, and when given,
/// whose path passes the registered path filter
/// ([`Store::set_path_filter`]), of `language`, of `kind`.
#[derive(Debug, Clone, Default)]
pub struct ChunkFilter {
    pub branch: String,
    pub path_filtered: bool,
    pub language: Option<String>,
    pub kind: Option<String>,
}

impl ChunkFilter {
    /// SQL conditions on `c` (chunks) and `k` (catalog) and their
    /// parameters; `?1` is the branch.
    fn sql(&self) -> (String, Vec<Value>) {
        let mut sql = String::new();
        let mut params = vec![Value::Text(self.branch.clone())];
        if self.path_filtered {
            sql.push_str(" AND ken_path_matches(k.path)");
        }
        if let Some(lang) = &self.language {
            params.push(Value::Text(lang.to_ascii_lowercase()));
            // A lookup only when filtering: the queries do not join `files`.
            sql.push_str(&format!(
                " AND (SELECT language FROM files WHERE id = c.file_id) = ?{}",
                params.len()
            ));
        }
        if let Some(kind) = &self.kind {
            params.push(Value::Text(kind.to_ascii_lowercase()));
            sql.push_str(&format!(" AND c.kind = ?{}", params.len()));
        }
        (sql, params)
    }

    /// [`Self::sql`] with one more parameter, `last`: its number too.
    fn sql_and(&self, last: Value) -> (String, Vec<Value>, usize) {
        let (sql, mut params) = self.sql();
        params.push(last);
        let number = params.len();
        (sql, params, number)
    }
}

/// How FTS5 ranks: ken's `ken_bm25` (which skips the lengths of rows that
/// cannot make the top) or FTS5's own `bm25()`, with column weights
/// (symbol, path, body).
#[derive(Debug, Clone, Copy)]
pub struct Bm25Ranking {
    pub stock: bool,
    pub weights: (f64, f64, f64),
}

/// The best rows of a lexical ranking, and every matching row's score when
/// the ranking kept them.
pub struct LexicalRanking {
    /// (rowid, FTS5's rank: the negated score), best first.
    pub top: Vec<(i64, f64)>,
    pub scores: Option<MatchScores>,
}

/// `ken_bm25` reads the lengths given while this lives ([`Store::use_row_lengths`]).
pub struct RowLengthsInUse<'a>(&'a Store);

impl Drop for RowLengthsInUse<'_> {
    fn drop(&mut self) {
        *self.0.bm25.lengths.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }
}

/// Reads see one state of the index while this lives ([`Store::read_snapshot`]).
pub struct ReadSnapshot<'a>(#[allow(dead_code)] rusqlite::Transaction<'a>);

/// A chunk as a search reads it; the text and vectors only when asked for.
#[derive(Debug, Clone)]
pub struct ChunkRow {
    pub path: String,
    pub start_line: u32,
    pub end_line: u32,
    pub kind: String,
    pub symbol: Option<String>,
    pub language: String,
    pub context: Option<String>,
    pub text: Option<String>,
    pub content_hash: i64,
    /// Its comments' and docstrings' lines ([`crate::source::chunk::Chunk::comments_label`]).
    pub comments: Option<String>,
    /// Its vector of the model asked for.
    pub vector: Option<Vec<u8>>,
    /// Its signature vectors (one per name, end to end) of the model asked for.
    pub signature: Option<Vec<u8>>,
    /// How many definitions it holds side by side: its names that lie in
    /// none of its other names (two or more when tiny ones were packed;
    /// one for a function with definitions nested in it).
    pub side_by_side: u32,
}

/// [`ChunkRow::side_by_side`] of the chunk `c`, as an SQL expression: its
/// names that lie in none of its other names (a label without ", " has one).
/// A macro, so each statement that reads it stays one literal (no string built
/// per lookup).
macro_rules! side_by_side_sql {
    () => {
        "CASE WHEN instr(c.symbol, ', ') > 0 THEN
        (SELECT count(*) FROM chunk_symbols s WHERE s.chunk_id = c.id AND NOT EXISTS (
            SELECT 1 FROM chunk_symbols o
            WHERE o.chunk_id = c.id AND o.rowid <> s.rowid
              AND o.start_line <= s.start_line AND s.end_line <= o.end_line
              AND (o.start_line < s.start_line OR s.end_line < o.end_line OR o.rowid < s.rowid)))
    ELSE 1 END"
    };
}
pub(super) use side_by_side_sql;

/// A definition of a symbol key: its chunk and where it is.
#[derive(Debug, Clone)]
pub struct SymbolDefinition {
    pub chunk_id: i64,
    pub file_id: i64,
    pub kind: String,
    pub language: String,
    pub name: String,
    pub start_line: u32,
    pub end_line: u32,
}

impl Store {
    /// Sets what `ken_path_matches(path)`, which [`ChunkFilter::path_filtered`]
    /// uses, lets through: `matches` (or every path when `None`).
    pub fn set_path_filter(&self, matches: Option<PathPredicate>) {
        *self.path_filter.lock().unwrap_or_else(|e| e.into_inner()) = matches;
    }

    /// Registers `ken_bm25` ([`super::bm25`]) on this connection.
    pub fn register_bm25(&self) -> Result<()> {
        super::bm25::register(&self.conn, self.bm25.clone())
    }

    /// Every chunk's length as `ken_bm25` reads it, exact for the lexical
    /// generation of the snapshot it is read in. `None` when the rowids are
    /// too sparse to keep.
    pub fn row_lengths(&self) -> Result<Option<RowLengths>> {
        // FTS5's own table: a varint per column for each row.
        let mut stmt = self.conn.prepare("SELECT id, sz FROM chunks_fts_docsize ORDER BY id")?;
        let rows = stmt
            .query_map([], |r| {
                Ok((r.get::<_, i64>(0)?, docsize_total(r.get_ref(1)?.as_blob()?)))
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(RowLengths::new(&rows))
    }

    /// `ken_bm25` on this connection reads each row's length from `lengths`
    /// until the returned guard drops (then from the index again). The
    /// caller holds them to the generation of its snapshot.
    pub fn use_row_lengths(&self, lengths: Option<std::sync::Arc<RowLengths>>) -> RowLengthsInUse<'_> {
        *self.bm25.lengths.lock().unwrap_or_else(|e| e.into_inner()) = lengths;
        RowLengthsInUse(self)
    }

    /// How many batches have changed the chunks: [`RowLengths`] read at one
    /// generation hold for every snapshot of it.
    pub fn lexical_generation(&self) -> Result<i64> {
        super::lexical::lexical_generation(&self.conn)
    }

    /// A read transaction: every read until it drops sees one snapshot.
    pub fn read_snapshot(&self) -> Result<ReadSnapshot<'_>> {
        Ok(ReadSnapshot(self.conn.unchecked_transaction()?))
    }

    /// Whether `branch` has a catalog (`None`: whether any branch has).
    pub fn has_catalog(&self, branch: Option<&str>) -> Result<bool> {
        Ok(match branch {
            Some(branch) => self.conn.query_row(
                "SELECT EXISTS (SELECT 1 FROM catalog WHERE branch = ?1)",
                [branch],
                |r| r.get(0),
            )?,
            None => self
                .conn
                .query_row("SELECT EXISTS (SELECT 1 FROM catalog)", [], |r| r.get(0))?,
        })
    }

    /// Chunks in the index, all branches (counted; the stored count is
    /// [`super::meta::MetaKey::ChunkCount`]).
    pub fn chunk_rows_counted(&self) -> Result<i64> {
        Ok(self.conn.query_row("SELECT count(*) FROM chunks", [], |r| r.get(0))?)
    }

    /// The best `depth` chunks by BM25 for `fts_query` (an FTS5 MATCH
    /// expression), of any branch: FTS5 ranks alone, with no join per match.
    /// `frequencies`: the phrases' document frequencies, as [`Store::bm25_of`]
    /// takes them (`None`, and `bm25()`: FTS5 counts them). With `ken_bm25`,
    /// also every matching row's score, as [`Store::bm25_of`] would give it.
    pub fn lexical_ranked(
        &self,
        fts_query: &str,
        frequencies: Option<&[u8]>,
        depth: usize,
        ranking: Bm25Ranking,
    ) -> Result<LexicalRanking> {
        let (ws, wp, wb) = ranking.weights;
        let rank = if ranking.stock {
            format!("bm25(chunks_fts, {ws}, {wp}, {wb})")
        } else {
            format!("ken_bm25(chunks_fts, ?2, ?3, {ws}, {wp}, {wb})")
        };
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT rowid, {rank} AS s FROM chunks_fts
             WHERE chunks_fts MATCH ?1 ORDER BY s LIMIT ?2"
        ))?;
        let depth = depth as i64;
        let mut args: Vec<&dyn rusqlite::ToSql> = vec![&fts_query, &depth];
        if !ranking.stock {
            args.push(&frequencies);
        }
        let recording = self.bm25.record_scores();
        let ranked = stmt
            .query_map(&*args, |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<rusqlite::Result<_>>()
            .context("lexical search failed")?;
        // The statement was reset as its rows were dropped: the ranking has
        // handed over its scores.
        Ok(LexicalRanking {
            top: ranked,
            scores: recording.last(),
        })
    }

    /// The first `limit` of `ranked` (chunk ids, in order) that `filter` lets through.
    pub fn first_visible<T: Copy>(
        &self,
        filter: &ChunkFilter,
        ranked: &[(i64, T)],
        limit: usize,
    ) -> Result<Vec<(i64, T)>> {
        let (filter_sql, mut params, id_param) = filter.sql_and(Value::Null);
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT c.id FROM chunks c
             JOIN catalog k ON k.file_id = c.file_id AND k.branch = ?1
             WHERE c.id = ?{id_param}{filter_sql}"
        ))?;
        let mut visible = Vec::with_capacity(limit.min(ranked.len()));
        for &(id, rank) in ranked {
            if visible.len() >= limit {
                break;
            }
            *params.last_mut().expect("id parameter") = Value::Integer(id);
            if stmt.exists(params_from_iter(params.iter()))? {
                visible.push((id, rank));
            }
        }
        Ok(visible)
    }

    /// The chunks `filter` lets through whose content has one of the
    /// `embeddings` (embedding ids, in order, with a score each), until
    /// `limit` chunks: a content shared by several chunks gives each its score.
    pub fn chunks_of_embeddings(
        &self,
        filter: &ChunkFilter,
        embeddings: &[(i64, f32)],
        limit: usize,
    ) -> Result<Vec<(i64, f32)>> {
        let (filter_sql, mut params, id_param) = filter.sql_and(Value::Null);
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT c.id FROM embeddings e
             JOIN chunks c ON c.content_hash = e.content_hash
             JOIN catalog k ON k.file_id = c.file_id AND k.branch = ?1
             WHERE e.id = ?{id_param}{filter_sql}"
        ))?;
        let mut out = Vec::new();
        for &(embedding_id, score) in embeddings {
            *params.last_mut().expect("id parameter") = Value::Integer(embedding_id);
            let ids: Vec<i64> = stmt
                .query_map(params_from_iter(params.iter()), |r| r.get(0))?
                .collect::<rusqlite::Result<_>>()?;
            out.extend(ids.into_iter().map(|id| (id, score)));
            if out.len() >= limit {
                break;
            }
        }
        Ok(out)
    }

    /// The `ken_bm25` score of each of `ids` that matches `fts_query`, given
    /// the matched terms' document frequencies (`frequencies`: f64s,
    /// little-endian; `None`: FTS5 counts them).
    pub fn bm25_of(
        &self,
        fts_query: &str,
        frequencies: Option<&[u8]>,
        ids: &[i64],
        weights: (f64, f64, f64),
    ) -> Result<Vec<(i64, f64)>> {
        let (ws, wp, wb) = weights;
        // One pass over the query's matches (`+rowid` keeps the list out of
        // FTS5's plan, which would restart the match once per id).
        let list = ids.iter().map(|id| id.to_string()).collect::<Vec<_>>().join(",");
        let mut stmt = self.conn.prepare(&format!(
            "SELECT rowid, ken_bm25(chunks_fts, 0, ?2, {ws}, {wp}, {wb}) FROM chunks_fts
             WHERE chunks_fts MATCH ?1 AND +rowid IN ({list})"
        ))?;
        let rows = stmt.query_map(params![fts_query, frequencies], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Chunk `id` as cataloged on `branch`, with its text when `with_text`,
    /// its vector of `vector_model` and its signature vectors of
    /// `signature_model` when given (one lookup; the CASEs skip the rest).
    pub fn chunk_row(
        &self,
        branch: &str,
        id: i64,
        with_text: bool,
        vector_model: Option<&str>,
        signature_model: Option<&str>,
    ) -> Result<ChunkRow> {
        let mut stmt = self.conn.prepare_cached(concat!(
            "SELECT k.path, c.start_line, c.end_line, c.kind, c.symbol, f.language, c.context,
                    CASE WHEN ?3 THEN (SELECT text FROM contents WHERE hash = c.content_hash) END,
                    CASE WHEN ?4 IS NOT NULL THEN
                        (SELECT vector FROM embeddings WHERE content_hash = c.content_hash AND model = ?4) END,
                    CASE WHEN ?5 IS NOT NULL AND c.symbol IS NOT NULL THEN
                        (SELECT vector FROM embeddings WHERE content_hash = c.content_hash AND model = ?5) END,
                    c.content_hash, c.comments, ",
            side_by_side_sql!(),
            "
             FROM chunks c
             JOIN files f ON f.id = c.file_id
             JOIN catalog k ON k.file_id = c.file_id AND k.branch = ?2
             WHERE c.id = ?1"
        ))?;
        let row = stmt.query_row(params![id, branch, with_text, vector_model, signature_model], |r| {
            Ok(ChunkRow {
                path: r.get(0)?,
                start_line: r.get(1)?,
                end_line: r.get(2)?,
                kind: r.get(3)?,
                symbol: r.get(4)?,
                language: r.get(5)?,
                context: r.get(6)?,
                text: r.get(7)?,
                vector: r.get(8)?,
                signature: r.get(9)?,
                content_hash: r.get(10)?,
                comments: r.get(11)?,
                side_by_side: r.get(12)?,
            })
        })?;
        Ok(row)
    }

    /// The lines where chunk `id`'s import statements start: the graph's
    /// import rows within its lines.
    pub fn chunk_import_lines(&self, id: i64) -> Result<Vec<u32>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT r.line FROM chunks c JOIN refs r ON r.file_id = c.file_id
             WHERE c.id = ?1 AND r.kind = 'import' AND r.line BETWEEN c.start_line AND c.end_line",
        )?;
        let lines = stmt.query_map([id], |r| r.get(0))?;
        Ok(lines.collect::<rusqlite::Result<_>>()?)
    }

    /// The text of chunk `id` with its comments' lines (`None`: no such chunk).
    pub fn chunk_text_and_comments(&self, id: i64) -> Result<Option<(String, Option<String>)>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT t.text, c.comments FROM chunks c JOIN contents t ON t.hash = c.content_hash WHERE c.id = ?1",
        )?;
        Ok(stmt.query_row([id], |r| Ok((r.get(0)?, r.get(1)?))).optional()?)
    }

    /// The vector of `model` stored for `content_hash`, encoded.
    pub fn vector_of(&self, content_hash: i64, model: &str) -> Result<Option<Vec<u8>>> {
        Ok(self
            .conn
            .query_row(
                "SELECT vector FROM embeddings WHERE content_hash = ?1 AND model = ?2",
                params![content_hash, model],
                |r| r.get(0),
            )
            .optional()?)
    }

    /// The innermost chunk of `branch` at `path`:`line`: (chunk id, content hash).
    pub fn innermost_chunk_at(&self, branch: &str, path: &str, line: u32) -> Result<Option<(i64, i64)>> {
        Ok(self
            .conn
            .query_row(
                "SELECT c.id, c.content_hash FROM chunks c
                 JOIN catalog k ON k.file_id = c.file_id AND k.branch = ?1
                 WHERE k.path = ?2 AND c.start_line <= ?3 AND c.end_line >= ?3
                 ORDER BY c.end_line - c.start_line LIMIT 1",
                params![branch, path, line],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()?)
    }

    /// How many lines `path` has on `branch` (`None`: not in its catalog).
    pub fn line_count_of(&self, branch: &str, path: &str) -> Result<Option<u32>> {
        Ok(self
            .conn
            .query_row(
                "SELECT f.line_count FROM catalog k JOIN files f ON f.id = k.file_id WHERE k.branch = ?1 AND k.path = ?2",
                params![branch, path],
                |r| r.get(0),
            )
            .optional()?)
    }

    /// Up to 50 definitions of the symbol key `key` that `filter` lets
    /// through; with `spelled`, those named exactly so first.
    pub fn definitions_of_key(
        &self,
        filter: &ChunkFilter,
        key: &str,
        spelled: Option<&str>,
    ) -> Result<Vec<SymbolDefinition>> {
        let (filter_sql, mut params, key_param) = filter.sql_and(Value::Text(key.to_string()));
        let order = match spelled {
            Some(spelled) => {
                params.push(Value::Text(spelled.to_string()));
                format!("ORDER BY s.name = ?{} DESC", params.len())
            }
            None => String::new(),
        };
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT c.id, c.file_id, c.kind, (SELECT language FROM files WHERE id = c.file_id),
                    s.name, s.start_line, s.end_line FROM chunk_symbols s
             JOIN chunks c ON c.id = s.chunk_id
             JOIN catalog k ON k.file_id = c.file_id AND k.branch = ?1
             WHERE s.key = ?{key_param}{filter_sql}
             {order} LIMIT 50"
        ))?;
        let rows = stmt.query_map(params_from_iter(params.iter()), |r| {
            Ok(SymbolDefinition {
                chunk_id: r.get(0)?,
                file_id: r.get(1)?,
                kind: r.get(2)?,
                language: r.get(3)?,
                name: r.get(4)?,
                start_line: r.get(5)?,
                end_line: r.get(6)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }
}
