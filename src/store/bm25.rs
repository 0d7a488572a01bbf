//! `ken_bm25`: FTS5's `bm25()` for a query that keeps only its best `k` rows.
//!
//! FTS5 scores every matching row, and most of that cost is reading each
//! row's length (its `docsize` record). This function computes the same score
//! (same formula, same operations, so equal to the last bit) but first bounds
//! it from the row's term frequencies alone: the score can only fall as the
//! row gets longer, so a row whose bound is below the `k`-th best score seen
//! so far cannot enter the top `k`, and its length is never read. Such rows
//! get 0, which sorts after every real score. The first `k` rows of
//! `ORDER BY ken_bm25(...) LIMIT k` are therefore exactly those of `bm25()`.
//!
//! SQL: `ken_bm25(fts_table, k, frequencies, weight_col0, weight_col1, ...)`.
//! `k` 0 scores every row (the way to score a few chosen rows). `frequencies`
//! is a blob of the phrases' document frequencies (f64 little-endian, one
//! per phrase, as the index keeps them), or NULL to count them as FTS5 does:
//! each count walks the phrase's whole list, which the caller has often read
//! already.
//!
//! A long-lived searcher can hand the function every row's length
//! ([`RowLengths`], on the connection's [`Bm25Slot`]): it then reads no
//! length from the index at all.
//!
//! A ranking can also keep every matching row's score ([`MatchScores`]):
//! a hybrid search needs the BM25 of chunks only the vectors found, and
//! the ranking that found the lexical candidates has already scored every
//! row the query matches; asking FTS5 again would walk the same lists.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::ffi::{c_int, c_void, CStr};
use std::ptr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::{bail, Result};
use rusqlite::ffi;
use rusqlite::Connection;

const K1: f64 = 1.2;
const B: f64 = 0.75;
const NAME: &CStr = c"ken_bm25";
/// The most rows a ranking keeps the scores of (24 bytes each): a match
/// wider than this is rare, and its few rows wanted are cheaper scored again.
const MAX_RECORDED_ROWS: usize = 1 << 20;

/// Each row's length in tokens (all columns, as FTS5's docsize table keeps
/// it), by rowid, as of one snapshot: exact for every snapshot of the same
/// lexical generation, since every batch that adds or removes chunks moves
/// the generation on.
pub struct RowLengths {
    /// The rowid of `by_offset[0]`.
    first: i64,
    /// `u32::MAX`: no such row.
    by_offset: Vec<u32>,
}

impl RowLengths {
    /// `rows`: (rowid, length: [`docsize_total`]). `None` when a length is
    /// unreadable, or when the rowids are spread over more than 4 times as
    /// many values as there are rows, and a million (an index much rewritten
    /// in place: its searches then read each length from the index).
    pub(super) fn new(rows: &[(i64, Option<u32>)]) -> Option<RowLengths> {
        let first = rows.iter().map(|(rowid, _)| *rowid).min().unwrap_or(0);
        let last = rows.iter().map(|(rowid, _)| *rowid).max().unwrap_or(0);
        let span = usize::try_from(last.checked_sub(first)?).ok()?.checked_add(1)?;
        if span > 4 * rows.len() + 1_000_000 {
            return None;
        }
        let mut by_offset = vec![u32::MAX; span];
        for &(rowid, length) in rows {
            by_offset[(rowid - first) as usize] = length?;
        }
        Some(RowLengths { first, by_offset })
    }

    fn get(&self, rowid: i64) -> Option<u32> {
        let offset = usize::try_from(rowid.checked_sub(self.first)?).ok()?;
        let length = *self.by_offset.get(offset)?;
        (length != u32::MAX).then_some(length)
    }
}

/// A row's length from its docsize record: the sum of its varints
/// (SQLite's encoding: 7 bits a byte, the high bit set on all but the last,
/// a ninth byte whole). `None` when malformed.
pub(super) fn docsize_total(record: &[u8]) -> Option<u32> {
    let mut total = 0u64;
    let mut bytes = record.iter();
    while let Some(&first) = bytes.next() {
        let mut value = u64::from(first & 0x7f);
        let mut byte = first;
        let mut read = 1;
        while byte & 0x80 != 0 {
            byte = *bytes.next()?;
            read += 1;
            value = if read == 9 {
                (value << 8) | u64::from(byte)
            } else {
                (value << 7) | u64::from(byte & 0x7f)
            };
            if read == 9 {
                break;
            }
        }
        total += value;
    }
    u32::try_from(total).ok().filter(|&t| t != u32::MAX)
}

/// What `ken_bm25` shares with its connection.
#[derive(Default)]
pub struct Bm25Slot {
    /// The rows' lengths to read, when the connection has them.
    pub lengths: Mutex<Option<Arc<RowLengths>>>,
    /// How many rows' scores the rankings run now keep (0: none) ...
    recording: AtomicUsize,
    /// ... and the last one's, once its query has finished.
    recorded: Mutex<Option<MatchScores>>,
}

impl Bm25Slot {
    /// The rankings run until the guard drops keep every matching row's
    /// score; [`RecordingScores::last`] gives the last one's.
    pub fn record_scores(&self) -> RecordingScores<'_> {
        self.record_scores_of_at_most(MAX_RECORDED_ROWS)
    }

    /// The same, a match of more than `rows` rows keeping none.
    fn record_scores_of_at_most(&self, rows: usize) -> RecordingScores<'_> {
        *self.recorded.lock().unwrap_or_else(|e| e.into_inner()) = None;
        self.recording.store(rows, Ordering::Relaxed);
        RecordingScores(self)
    }
}

/// Rankings keep their scores while this lives ([`Bm25Slot::record_scores`]).
pub struct RecordingScores<'a>(&'a Bm25Slot);

impl RecordingScores<'_> {
    /// The scores of the last ranking that finished (its statement reset).
    pub fn last(&self) -> Option<MatchScores> {
        self.0.recorded.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

impl Drop for RecordingScores<'_> {
    fn drop(&mut self) {
        self.0.recording.store(0, Ordering::Relaxed);
    }
}

/// Every row one ranking matched, by rowid, with its BM25 (positive) where
/// it was computed: a row skipped for its bound has none.
pub struct MatchScores {
    rows: Vec<(i64, Option<f64>)>,
}

/// A row's score in [`MatchScores`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum MatchScore {
    Scored(f64),
    /// Matched, but skipped for its bound: score it again to know.
    Unscored,
    /// The query does not match the row: its BM25 is 0.
    NotMatched,
}

impl MatchScores {
    fn new(mut rows: Vec<(i64, Option<f64>)>) -> MatchScores {
        // FTS5 visits rows in rowid order; sorted here if not.
        if !rows.is_sorted_by_key(|(rowid, _)| *rowid) {
            rows.sort_unstable_by_key(|(rowid, _)| *rowid);
        }
        MatchScores { rows }
    }

    pub fn of(&self, rowid: i64) -> MatchScore {
        match self.rows.binary_search_by_key(&rowid, |(r, _)| *r) {
            Ok(at) => self.rows[at].1.map_or(MatchScore::Unscored, MatchScore::Scored),
            Err(_) => MatchScore::NotMatched,
        }
    }
}

unsafe extern "C" fn drop_slot(p: *mut c_void) {
    drop(Arc::from_raw(p.cast::<Bm25Slot>().cast_const()));
}

/// Registers `ken_bm25` on this connection, reading row lengths from `slot`
/// when it holds them.
pub fn register(conn: &Connection, slot: Arc<Bm25Slot>) -> Result<()> {
    // SAFETY: the handle stays valid while `conn` lives; the statement is
    // finalized before returning, and `api` is written by SQLite during step.
    unsafe {
        let db = conn.handle();
        let mut api: *mut ffi::fts5_api = ptr::null_mut();
        let mut stmt: *mut ffi::sqlite3_stmt = ptr::null_mut();
        if ffi::sqlite3_prepare_v2(db, c"SELECT fts5(?1)".as_ptr(), -1, &mut stmt, ptr::null_mut()) != ffi::SQLITE_OK {
            bail!("this SQLite has no FTS5");
        }
        ffi::sqlite3_bind_pointer(
            stmt,
            1,
            (&mut api as *mut *mut ffi::fts5_api).cast(),
            c"fts5_api_ptr".as_ptr(),
            None,
        );
        ffi::sqlite3_step(stmt);
        ffi::sqlite3_finalize(stmt);
        let Some(create) = api.as_ref().and_then(|a| a.xCreateFunction) else {
            bail!("this SQLite's FTS5 takes no ranking functions");
        };
        // FTS5 owns this reference once registered, and drops it with the
        // connection (`drop_slot`); not when registering fails.
        let user_data = Arc::into_raw(slot).cast_mut().cast::<c_void>();
        if create(api, NAME.as_ptr(), user_data, Some(ken_bm25), Some(drop_slot)) != ffi::SQLITE_OK {
            drop_slot(user_data);
            bail!("cannot register the ranking function {NAME:?}");
        }
    }
    Ok(())
}

/// Where a ranking keeps its scores until its query finishes.
struct Recorder {
    slot: Arc<Bm25Slot>,
    rows: Vec<(i64, Option<f64>)>,
    /// The most rows kept: past that, none.
    most: usize,
}

/// What one query's rows share: IDF per phrase, average row length, column
/// weights, the best `k` scores so far, and the rows' lengths if known.
struct QueryState {
    lengths: Option<Arc<RowLengths>>,
    /// Every row scored, when the slot asked for them (handed to it when
    /// the query finishes).
    record: Option<Recorder>,
    idf: Vec<f64>,
    avgdl: f64,
    weights: Vec<f64>,
    k: usize,
    best: BinaryHeap<Reverse<u64>>,
    freq: Vec<f64>,
}

/// SQLite's result code as a `Result`.
fn check(rc: c_int) -> Result<(), c_int> {
    if rc == ffi::SQLITE_OK {
        Ok(())
    } else {
        Err(rc)
    }
}

impl Drop for QueryState {
    fn drop(&mut self) {
        if let Some(Recorder { slot, rows, .. }) = self.record.take() {
            *slot.recorded.lock().unwrap_or_else(|e| e.into_inner()) = Some(MatchScores::new(rows));
        }
    }
}

impl QueryState {
    /// Keeps a row's score when asked to, up to the record's most rows:
    /// past that the record is dropped (the rows wanted are scored again).
    fn record_row(&mut self, row: i64, score: Option<f64>) {
        if let Some(record) = &mut self.record {
            if record.rows.len() < record.most {
                record.rows.push((row, score));
            } else {
                self.record = None;
            }
        }
    }

    /// The `k`-th best score so far, once `k` rows have been scored.
    fn threshold(&self) -> Option<f64> {
        (self.best.len() >= self.k).then(|| self.best.peek().map_or(0.0, |s| f64::from_bits(s.0)))
    }

    fn keep(&mut self, score: f64) {
        if self.k == 0 {
            return;
        }
        if self.best.len() < self.k {
            self.best.push(Reverse(score.to_bits()));
        } else if self.best.peek().is_some_and(|s| score > f64::from_bits(s.0)) {
            self.best.pop();
            self.best.push(Reverse(score.to_bits()));
        }
    }

    /// The row's score given its length in tokens (FTS5's bm25 formula).
    fn score(&self, length: f64) -> f64 {
        let mut score = 0.0;
        for (idf, &f) in self.idf.iter().zip(&self.freq) {
            score += idf * ((f * (K1 + 1.0)) / (f + K1 * (1.0 - B + B * length / self.avgdl)));
        }
        score
    }
}

/// FTS5's IDF of a phrase found in `hits` of `rows` rows.
pub fn idf_of(rows: f64, hits: f64) -> f64 {
    let value = ((rows - hits + 0.5) / (hits + 0.5)).ln();
    if value <= 0.0 {
        1e-6
    } else {
        value
    }
}

/// The document frequency that gives a term found in `hits` of `rows` rows
/// `share` of its IDF ([`idf_of`] solved for `hits`): how a term is weighed
/// less through the frequencies `ken_bm25` is given.
pub fn frequency_for_idf_share(rows: f64, hits: f64, share: f64) -> f64 {
    let ratio = (share * idf_of(rows, hits)).exp();
    ((rows + 0.5 - 0.5 * ratio) / (1.0 + ratio)).max(hits)
}

unsafe extern "C" fn drop_state(p: *mut c_void) {
    drop(Box::from_raw(p.cast::<QueryState>()));
}

unsafe extern "C" fn count_hit(_: *const ffi::Fts5ExtensionApi, _: *mut ffi::Fts5Context, n: *mut c_void) -> c_int {
    *n.cast::<i64>() += 1;
    ffi::SQLITE_OK
}

/// Reads the query's statistics the way FTS5's bm25 does.
unsafe fn new_state(
    api: &ffi::Fts5ExtensionApi,
    fts: *mut ffi::Fts5Context,
    args: &[*mut ffi::sqlite3_value],
) -> Result<QueryState, c_int> {
    let (Some(row_count), Some(total_size), Some(phrase_count), Some(query_phrase), Some(user_data)) = (
        api.xRowCount,
        api.xColumnTotalSize,
        api.xPhraseCount,
        api.xQueryPhrase,
        api.xUserData,
    ) else {
        return Err(ffi::SQLITE_MISUSE);
    };
    let slot = user_data(fts).cast::<Bm25Slot>().cast_const();
    let lengths = slot
        .as_ref()
        .and_then(|slot| slot.lengths.lock().unwrap_or_else(|e| e.into_inner()).clone());
    let record = match slot.as_ref().map(|s| s.recording.load(Ordering::Relaxed)) {
        Some(most) if most > 0 => {
            // A reference of our own: FTS5 holds the registered one.
            Arc::increment_strong_count(slot);
            Some(Recorder {
                slot: Arc::from_raw(slot),
                rows: Vec::new(),
                most,
            })
        }
        _ => None,
    };
    let (mut rows, mut tokens) = (0i64, 0i64);
    check(row_count(fts, &mut rows))?;
    check(total_size(fts, -1, &mut tokens))?;
    let avgdl = tokens as f64 / rows as f64;
    let phrases = phrase_count(fts).max(0) as usize;
    let k = args.first().map_or(0, |&v| ffi::sqlite3_value_int64(v).max(0) as usize);
    let given = args
        .get(1)
        .copied()
        .filter(|&v| ffi::sqlite3_value_type(v) == ffi::SQLITE_BLOB);
    let idf = match given {
        Some(blob) => {
            let len = ffi::sqlite3_value_bytes(blob).max(0) as usize;
            let data = ffi::sqlite3_value_blob(blob).cast::<u8>();
            let bytes = if data.is_null() {
                &[][..]
            } else {
                std::slice::from_raw_parts(data, len)
            };
            if bytes.len() != phrases * 8 {
                return Err(ffi::SQLITE_MISMATCH);
            }
            bytes
                .chunks_exact(8)
                .map(|b| idf_of(rows as f64, f64::from_le_bytes(b.try_into().expect("8 bytes"))))
                .collect()
        }
        None => {
            let mut idf = Vec::with_capacity(phrases);
            for i in 0..phrases {
                let mut hits = 0i64;
                check(query_phrase(
                    fts,
                    i as c_int,
                    (&mut hits as *mut i64).cast(),
                    Some(count_hit),
                ))?;
                idf.push(idf_of(rows as f64, hits as f64));
            }
            idf
        }
    };
    let weights = args.iter().skip(2).map(|&v| ffi::sqlite3_value_double(v)).collect();
    Ok(QueryState {
        lengths,
        record,
        avgdl,
        weights,
        k,
        best: BinaryHeap::with_capacity(k + 1),
        freq: vec![0.0; idf.len()],
        idf,
    })
}

unsafe fn score_row(
    api: &ffi::Fts5ExtensionApi,
    fts: *mut ffi::Fts5Context,
    args: &[*mut ffi::sqlite3_value],
) -> Result<f64, c_int> {
    let (Some(get_aux), Some(set_aux), Some(phrase_first), Some(phrase_next), Some(column_size), Some(rowid)) = (
        api.xGetAuxdata,
        api.xSetAuxdata,
        api.xPhraseFirst,
        api.xPhraseNext,
        api.xColumnSize,
        api.xRowid,
    ) else {
        return Err(ffi::SQLITE_MISUSE);
    };
    let mut state = get_aux(fts, 0).cast::<QueryState>();
    if state.is_null() {
        let boxed = Box::into_raw(Box::new(new_state(api, fts, args)?));
        check(set_aux(fts, boxed.cast(), Some(drop_state)))?;
        state = boxed;
    }
    let state = &mut *state;
    // Each phrase's own position list: cheaper than the merged instance list.
    for phrase in 0..state.freq.len() {
        let mut iter = ffi::Fts5PhraseIter {
            a: ptr::null(),
            b: ptr::null(),
        };
        let (mut column, mut offset) = (0, 0);
        let mut f = 0.0;
        check(phrase_first(fts, phrase as c_int, &mut iter, &mut column, &mut offset))?;
        while column >= 0 {
            f += state.weights.get(column as usize).copied().unwrap_or(1.0);
            phrase_next(fts, &mut iter, &mut column, &mut offset);
        }
        state.freq[phrase] = f;
    }
    let row = rowid(fts);
    let known = state.lengths.as_ref().and_then(|l| l.get(row));
    let length = match known {
        Some(length) => f64::from(length),
        None => {
            // A row of length 0 scores highest: the bound for any length.
            if state.threshold().is_some_and(|t| state.score(0.0) < t) {
                state.record_row(row, None);
                return Ok(0.0);
            }
            let mut length = 0;
            check(column_size(fts, -1, &mut length))?;
            f64::from(length)
        }
    };
    let score = state.score(length);
    state.keep(score);
    state.record_row(row, Some(score));
    Ok(score)
}

unsafe extern "C" fn ken_bm25(
    api: *const ffi::Fts5ExtensionApi,
    fts: *mut ffi::Fts5Context,
    ctx: *mut ffi::sqlite3_context,
    n: c_int,
    values: *mut *mut ffi::sqlite3_value,
) {
    let args: &[*mut ffi::sqlite3_value] = if values.is_null() || n <= 0 {
        &[]
    } else {
        std::slice::from_raw_parts(values, n as usize)
    };
    match score_row(&*api, fts, args) {
        Ok(score) => ffi::sqlite3_result_double(ctx, -score),
        Err(rc) => ffi::sqlite3_result_error_code(ctx, rc),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frequency_that_gives_a_share_of_the_idf() {
        for (hits, rows) in [(1.0, 100.0), (40.0, 10_000.0), (3_000.0, 100_000.0)] {
            let shared = frequency_for_idf_share(rows, hits, 0.5);
            assert!(
                (idf_of(rows, shared) - 0.5 * idf_of(rows, hits)).abs() < 1e-9,
                "{hits} of {rows}"
            );
            assert_eq!(frequency_for_idf_share(rows, hits, 1.0).round(), hits);
        }
    }

    fn table() -> Connection {
        table_with(Default::default())
    }

    /// Rows of varied lengths and term frequencies over a small vocabulary, so
    /// many rows tie on some terms and differ in length; `ken_bm25` reads `slot`.
    fn table_with(slot: Arc<Bm25Slot>) -> Connection {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(
            "CREATE VIRTUAL TABLE t USING fts5(symbol, path, body, content = '', contentless_delete = 1);",
        )
        .unwrap();
        let words = [
            "parse", "config", "value", "render", "batch", "store", "session", "token", "read", "write",
        ];
        let mut seed = 7u64;
        let mut next = || {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (seed >> 33) as usize
        };
        for id in 1..=3000i64 {
            let pick = |n: usize, next: &mut dyn FnMut() -> usize| {
                (0..n)
                    .map(|_| words[next() % words.len()])
                    .collect::<Vec<_>>()
                    .join(" ")
            };
            let symbol = pick(1 + next() % 2, &mut next);
            let path = pick(2, &mut next);
            let body = pick(3 + next() % 60, &mut next);
            conn.execute(
                "INSERT INTO t(rowid, symbol, path, body) VALUES (?1, ?2, ?3, ?4)",
                rusqlite::params![id, symbol, path, body],
            )
            .unwrap();
        }
        // Deleted rows must not count, as in bm25().
        conn.execute("DELETE FROM t WHERE rowid % 10 = 0", []).unwrap();
        register(&conn, slot).unwrap();
        conn
    }

    fn top(conn: &Connection, function: &str, query: &str, k: i64) -> Vec<(i64, f64)> {
        let sql = format!("SELECT rowid, {function} AS s FROM t WHERE t MATCH ?1 ORDER BY s, rowid LIMIT ?2");
        let mut stmt = conn.prepare_cached(&sql).unwrap();
        let rows = stmt
            .query_map(rusqlite::params![query, k], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<rusqlite::Result<Vec<_>>>()
            .unwrap();
        rows
    }

    #[test]
    fn the_top_k_equals_fts5_bm25_to_the_last_bit() {
        let conn = table();
        let queries = [
            "parse",
            "parse OR config",
            "render OR batch OR store",
            "token OR read OR write OR session",
            "value",
        ];
        for query in queries {
            for k in [1, 5, 50, 400] {
                let expected = top(&conn, "bm25(t, 6.0, 2.0, 1.0)", query, k);
                let ours = top(&conn, "ken_bm25(t, ?2, NULL, 6.0, 2.0, 1.0)", query, k);
                assert_eq!(ours.len(), k as usize, "{query} k={k}");
                assert_eq!(ours, expected, "{query} k={k}");
            }
        }
    }

    /// Each term's document frequency, as the blob `ken_bm25` takes.
    fn frequencies_of(conn: &Connection, terms: &[&str]) -> Vec<u8> {
        terms
            .iter()
            .flat_map(|t| {
                conn.query_row("SELECT count(*) FROM t WHERE t MATCH ?1", [t], |r| r.get::<_, f64>(0))
                    .unwrap()
                    .to_le_bytes()
            })
            .collect()
    }

    #[test]
    fn the_top_k_with_the_frequencies_given_equals_fts5_bm25() {
        let conn = table();
        for terms in [
            &["parse"][..],
            &["render", "batch", "store"],
            &["token", "read", "write", "session"],
        ] {
            let query = terms.join(" OR ");
            let frequencies = frequencies_of(&conn, terms);
            for k in [1i64, 5, 50, 400] {
                let expected = top(&conn, "bm25(t, 6.0, 2.0, 1.0)", &query, k);
                let mut stmt = conn
                    .prepare(
                        "SELECT rowid, ken_bm25(t, ?2, ?3, 6.0, 2.0, 1.0) AS s FROM t WHERE t MATCH ?1
                         ORDER BY s, rowid LIMIT ?2",
                    )
                    .unwrap();
                let ours = stmt
                    .query_map(rusqlite::params![query, k, frequencies], |r| Ok((r.get(0)?, r.get(1)?)))
                    .unwrap()
                    .collect::<rusqlite::Result<Vec<(i64, f64)>>>()
                    .unwrap();
                assert_eq!(ours, expected, "{query} k={k}");
            }
        }
    }

    /// The table's row lengths, read from FTS5's docsize table.
    fn lengths_of(conn: &Connection) -> RowLengths {
        let mut stmt = conn.prepare("SELECT id, sz FROM t_docsize ORDER BY id").unwrap();
        let rows = stmt
            .query_map([], |r| {
                Ok((r.get::<_, i64>(0)?, docsize_total(r.get_ref(1)?.as_blob()?)))
            })
            .unwrap()
            .collect::<rusqlite::Result<Vec<_>>>()
            .unwrap();
        RowLengths::new(&rows).unwrap()
    }

    #[test]
    fn with_the_row_lengths_given_every_row_scores_as_bm25_scores_it() {
        let slot: Arc<Bm25Slot> = Default::default();
        let conn = table_with(slot.clone());
        let query = "parse OR render OR session";
        let expected = top(&conn, "bm25(t, 6.0, 2.0, 1.0)", query, 100_000);
        *slot.lengths.lock().unwrap() = Some(Arc::new(lengths_of(&conn)));
        let all = top(&conn, "ken_bm25(t, 20, NULL, 6.0, 2.0, 1.0)", query, 100_000);
        assert_eq!(all, expected, "no row skipped, every score exact");
        // The lengths are the ones read: others move the scores.
        let lengths = lengths_of(&conn);
        assert_eq!(lengths.first, 1);
        let halved = [vec![u32::MAX], lengths.by_offset.iter().map(|&l| l / 2).collect()].concat();
        *slot.lengths.lock().unwrap() = Some(Arc::new(RowLengths {
            first: 0,
            by_offset: halved,
        }));
        assert_ne!(
            top(&conn, "ken_bm25(t, 20, NULL, 6.0, 2.0, 1.0)", query, 100_000),
            expected
        );
        *slot.lengths.lock().unwrap() = None;
        assert_eq!(
            top(&conn, "ken_bm25(t, 20, NULL, 6.0, 2.0, 1.0)", query, 20),
            expected[..20]
        );
    }

    #[test]
    fn a_docsize_record_sums_its_varints() {
        assert_eq!(docsize_total(&[]), Some(0));
        assert_eq!(docsize_total(&[3, 0, 0x7f]), Some(130));
        // 300 = 0b10_0101100: 0x82 0x2c.
        assert_eq!(docsize_total(&[0x82, 0x2c, 1]), Some(301));
        assert_eq!(docsize_total(&[0x82]), None, "cut short");
        let kept = RowLengths::new(&[(1, Some(4)), (3, Some(9))]).unwrap();
        assert_eq!((kept.get(3), kept.get(2), kept.get(0)), (Some(9), None, None));
        assert!(
            RowLengths::new(&[(1, Some(4)), (50_000_000, Some(9))]).is_none(),
            "too sparse"
        );
        // Rowids far from 0 (an index whose first chunks were rewritten) are kept.
        let high = RowLengths::new(&[(40_000_000, Some(4)), (40_000_002, Some(9))]).unwrap();
        assert_eq!(
            (high.get(40_000_002), high.get(1), high.get(40_000_001)),
            (Some(9), None, None)
        );
        assert!(RowLengths::new(&[(1, None)]).is_none(), "a length unread");
    }

    #[test]
    fn rows_that_cannot_make_the_top_k_score_zero_after_every_real_score() {
        let conn = table();
        let all = top(
            &conn,
            "ken_bm25(t, 20, NULL, 6.0, 2.0, 1.0)",
            "parse OR render",
            100_000,
        );
        let real = all.iter().take_while(|(_, s)| *s < 0.0).count();
        assert!(real >= 20, "at least k rows carry their real score");
        assert!(real < all.len(), "some rows were skipped: {real} of {}", all.len());
        assert!(all[real..].iter().all(|(_, s)| *s == 0.0));
    }

    #[test]
    fn chosen_rows_score_with_given_frequencies_as_bm25_scores_them() {
        let conn = table();
        let query = "parse OR render OR session";
        let expected = top(&conn, "bm25(t, 6.0, 2.0, 1.0)", query, 100_000);
        let frequencies = frequencies_of(&conn, &["parse", "render", "session"]);
        let chosen: Vec<(i64, f64)> = expected.iter().skip(3).step_by(97).copied().collect();
        let mut stmt = conn
            .prepare("SELECT ken_bm25(t, 0, ?2, 6.0, 2.0, 1.0) FROM t WHERE t MATCH ?1 AND rowid = ?3")
            .unwrap();
        for (id, score) in &chosen {
            let ours: f64 = stmt
                .query_row(rusqlite::params![query, frequencies, id], |r| r.get(0))
                .unwrap();
            assert_eq!(ours, *score, "row {id}");
        }
        // One frequency per phrase, or an error rather than a wrong score.
        let short = frequencies[..8].to_vec();
        assert!(stmt
            .query_row(rusqlite::params![query, short, chosen[0].0], |r| r.get::<_, f64>(0))
            .is_err());
    }

    /// The scores a ranking kept: exactly `bm25()`'s for every row it
    /// scored, none for the rows it skipped for their bound, and rows the
    /// query does not match are told apart from both.
    #[test]
    fn a_ranking_keeps_every_matching_rows_score_when_asked() {
        let slot: Arc<Bm25Slot> = Default::default();
        let conn = table_with(slot.clone());
        let query = "parse OR render";
        let expected = top(&conn, "bm25(t, 6.0, 2.0, 1.0)", query, 100_000);
        let unmatched: Vec<i64> = (1..=3000)
            .filter(|id| id % 10 != 0 && !expected.iter().any(|(e, _)| e == id))
            .collect();
        assert!(!unmatched.is_empty());
        let ranked = |k: i64| {
            let recording = slot.record_scores();
            top(&conn, "ken_bm25(t, ?2, NULL, 6.0, 2.0, 1.0)", query, k);
            recording.last().expect("the ranking's scores")
        };
        // Without the rows' lengths: the top is scored, the rest partly skipped.
        let scores = ranked(20);
        let (mut scored, mut skipped) = (0, 0);
        for (id, score) in &expected {
            match scores.of(*id) {
                MatchScore::Scored(s) => {
                    assert_eq!(-s, *score, "row {id}");
                    scored += 1;
                }
                MatchScore::Unscored => skipped += 1,
                MatchScore::NotMatched => panic!("row {id} matches"),
            }
        }
        assert!(scored >= 20 && skipped > 0, "{scored} scored, {skipped} skipped");
        assert!(unmatched.iter().all(|id| scores.of(*id) == MatchScore::NotMatched));
        // With them, every matching row is scored.
        *slot.lengths.lock().unwrap() = Some(Arc::new(lengths_of(&conn)));
        let scores = ranked(20);
        for (id, score) in &expected {
            assert_eq!(scores.of(*id), MatchScore::Scored(-score), "row {id}");
        }
        // Nothing is kept unless asked.
        top(&conn, "ken_bm25(t, 20, NULL, 6.0, 2.0, 1.0)", query, 20);
        assert!(slot.record_scores().last().is_none());
        // A match wider than the rows a record may hold keeps none.
        let capped = slot.record_scores_of_at_most(expected.len() - 1);
        top(&conn, "ken_bm25(t, 20, NULL, 6.0, 2.0, 1.0)", query, 20);
        assert!(capped.last().is_none());
        drop(capped);
        let fits = slot.record_scores_of_at_most(expected.len());
        top(&conn, "ken_bm25(t, 20, NULL, 6.0, 2.0, 1.0)", query, 20);
        assert!(fits.last().is_some());
    }
}
