//! Graph queries on one branch: symbol lookup (name, `path:line` or id),
//! callers and callees to a depth, the shortest call path, definitions.
//!
//! Rows are read through the branch's catalog, so a branch never sees the
//! symbols or references of another branch's files.

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::Path;
use std::rc::Rc;

use anyhow::{bail, Result};

use super::resolve::{Confidence, Resolution};
use crate::store::Store;

pub use crate::store::graph::{Ref, Symbol};

impl Symbol {
    /// `Container.name`, or the name.
    pub fn qualified(&self) -> String {
        match &self.container {
            Some(c) if c != &self.name => format!("{c}.{}", self.name),
            _ => self.name.clone(),
        }
    }

    /// Stands for the top-level code of a file (references outside any definition).
    fn module_of(r: &Ref) -> Symbol {
        Symbol {
            id: 0,
            name: "<module>".to_string(),
            kind: "module".to_string(),
            container: None,
            path: r.path.clone(),
            line: 1,
            end_line: 1,
            language: r.language.clone(),
            file_id: r.file_id,
            parent: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Site {
    pub path: String,
    pub line: u32,
}

/// One resolved reference: `from` refers to `to` at `call_site`.
#[derive(Debug, Clone)]
pub struct Edge {
    pub from: Symbol,
    pub to: Symbol,
    /// call, method_call, constructor, inherits, implements or import.
    pub kind: String,
    pub confidence: Confidence,
    pub call_site: Site,
    /// Distance from the queried symbol (1: direct).
    pub depth: usize,
    /// For ambiguous edges: the definitions the reference may mean, the
    /// first [`MAX_CANDIDATES`] of them.
    pub candidates: Vec<Symbol>,
    /// For ambiguous edges: how many definitions the reference may mean
    /// (more than `candidates` lists when above [`MAX_CANDIDATES`]).
    pub candidate_count: usize,
}

impl Edge {
    /// `from -> to kind confidence`, for tests and logs.
    pub fn describe(&self) -> String {
        format!(
            "{}:{} -> {}:{} {} {}",
            self.from.path,
            self.from.qualified(),
            self.to.path,
            self.to.qualified(),
            self.kind,
            self.confidence.as_str()
        )
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    Callers,
    Callees,
}

/// The answer to a callers/callees query.
#[derive(Debug, Clone)]
pub struct CallGraph {
    pub symbol: Symbol,
    pub direction: Direction,
    pub depth: usize,
    pub edges: Vec<Edge>,
    /// Set when the edge limit or the reference limit per level cut the answer short.
    pub truncated: bool,
    /// Why the answer is partial, when `truncated`.
    pub note: Option<String>,
}

/// The answer to a path query: the calls from `from` to `to`, in order.
#[derive(Debug, Clone)]
pub struct CallPath {
    pub from: Symbol,
    pub to: Symbol,
    /// Empty when no path was found within the depth limit.
    pub edges: Vec<Edge>,
    /// Set when the reference limit per level stopped the search early (a
    /// path may exist that was not found, or a shorter one).
    pub truncated: bool,
    /// Why the search is partial, when `truncated`.
    pub note: Option<String>,
}

/// A symbol argument that names several definitions.
#[derive(Debug)]
pub struct Ambiguous {
    pub spec: String,
    pub candidates: Vec<Symbol>,
}

impl std::fmt::Display for Ambiguous {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "`{}` names {} definitions; pass one as `path:line` or by id:",
            self.spec,
            self.candidates.len()
        )?;
        for s in self.candidates.iter().take(30) {
            writeln!(f, "  {:>8}  {}:{}  {} {}", s.id, s.path, s.line, s.kind, s.qualified())?;
        }
        Ok(())
    }
}

impl std::error::Error for Ambiguous {}

/// Edges kept per query at most.
pub const MAX_EDGES: usize = 2000;
/// Calls followed at most by a path search.
pub const MAX_PATH_DEPTH: usize = 12;
/// Candidates listed on an ambiguous edge at most (the count says how many there are);
/// callees and paths follow an ambiguous reference to these only.
pub const MAX_CANDIDATES: usize = 10;
/// References examined per level of a callers/callees query or path search at
/// most, so that a name with huge fan-in or fan-out cannot take seconds.
pub const MAX_REFS_PER_LEVEL: usize = 5000;
const CALL_KINDS: &[&str] = &["call", "method_call", "constructor"];

/// Definitions shared between the caches and resolutions of one query.
pub type Shared = Rc<Vec<Rc<Symbol>>>;

/// The graph of one branch of an index, with caches for one session of queries.
pub struct Graph<'c> {
    store: &'c Store,
    pub(super) branch: String,
    by_name: HashMap<String, Rc<Vec<Rc<Symbol>>>>,
    /// `by_name` per language family: name -> [(family, definitions)].
    by_family: HashMap<String, Vec<(String, Shared)>>,
    by_id: HashMap<i64, Option<Symbol>>,
    pub(super) imports: HashMap<i64, Rc<Vec<Ref>>>,
    pub(super) paths: Option<Rc<Vec<String>>>,
    pub(super) module_cache: HashMap<String, bool>,
    /// Definitions of a name in a module's files, by family, name and module.
    pub(super) in_module_cache: HashMap<String, Rc<Vec<Rc<Symbol>>>>,
    /// Method calls on objects of unknown type, by (name, language family,
    /// class excluded): they resolve alike, so once per query.
    pub(super) method_cache: HashMap<(String, String, Option<String>), Resolution>,
}

impl<'c> Graph<'c> {
    /// The graph of the branch checked out at `root`. Fails plainly when the
    /// index has no graph rows for it.
    pub fn open(store: &'c Store, root: &Path) -> Result<Graph<'c>> {
        let branch = crate::source::git::head(root).catalog_key();
        let graph = Graph::for_branch(store, &branch);
        if !store.branch_has_files(&branch)? {
            bail!("this branch is not indexed; run `ken index` first");
        }
        if !store.branch_has_symbols(&branch)? {
            bail!(
                "the index has no code graph for this branch (no definitions in a language with a tags.scm: \
                 python, javascript, typescript, tsx, go, rust, java, c, cpp, csharp, ruby, php, kotlin, swift, scala)"
            );
        }
        Ok(graph)
    }

    /// The store and the branch (catalog key) this graph reads.
    pub fn store(&self) -> (&'c Store, &str) {
        (self.store, &self.branch)
    }

    pub fn for_branch(store: &'c Store, branch: &str) -> Graph<'c> {
        Graph {
            store,
            branch: branch.to_string(),
            by_name: HashMap::new(),
            by_family: HashMap::new(),
            by_id: HashMap::new(),
            imports: HashMap::new(),
            paths: None,
            module_cache: HashMap::new(),
            in_module_cache: HashMap::new(),
            method_cache: HashMap::new(),
        }
    }

    /// The catalog key of the branch.
    pub fn branch(&self) -> &str {
        &self.branch
    }

    /// The definitions of the version of `path` whose content hash is `hash`,
    /// in source order, if the index holds that version (of any branch).
    pub fn symbols_of_version(&self, path: &str, hash: i64) -> Result<Option<Vec<crate::source::extract::SymbolRow>>> {
        self.store.symbols_of_version(path, hash)
    }

    /// Definitions named `name` on the branch.
    pub fn symbols_named(&mut self, name: &str) -> Result<Rc<Vec<Rc<Symbol>>>> {
        if let Some(found) = self.by_name.get(name) {
            return Ok(found.clone());
        }
        let rows: Vec<Rc<Symbol>> = self
            .store
            .symbols_named(&self.branch, name)?
            .into_iter()
            .map(Rc::new)
            .collect();
        let rows = Rc::new(rows);
        self.by_name.insert(name.to_string(), rows.clone());
        Ok(rows)
    }

    /// Definitions named `name` in the language family `fam`, computed once per name and family.
    pub(super) fn family_named(&mut self, name: &str, fam: &str) -> Result<Rc<Vec<Rc<Symbol>>>> {
        if let Some(found) = self.by_family.get(name).and_then(|v| v.iter().find(|(f, _)| f == fam)) {
            return Ok(found.1.clone());
        }
        let rows: Vec<Rc<Symbol>> = self
            .symbols_named(name)?
            .iter()
            .filter(|s| super::resolve::family(&s.language) == fam)
            .cloned()
            .collect();
        let rows = Rc::new(rows);
        self.by_family
            .entry(name.to_string())
            .or_default()
            .push((fam.to_string(), rows.clone()));
        Ok(rows)
    }

    /// The symbol with this id, if its file is on the branch.
    pub fn symbol(&mut self, id: i64) -> Result<Option<Symbol>> {
        if let Some(s) = self.by_id.get(&id) {
            return Ok(s.clone());
        }
        let found = self.store.symbol_by_id(&self.branch, id)?;
        self.by_id.insert(id, found.clone());
        Ok(found)
    }

    /// The imports of a file version.
    pub(super) fn imports_of(&mut self, file_id: i64) -> Result<Rc<Vec<Ref>>> {
        if let Some(found) = self.imports.get(&file_id) {
            return Ok(found.clone());
        }
        let rows = Rc::new(self.store.imports_of_file(file_id)?);
        self.imports.insert(file_id, rows.clone());
        Ok(rows)
    }

    /// Every path on the branch (to tell repository modules from external ones).
    pub(super) fn branch_paths(&mut self) -> Result<Rc<Vec<String>>> {
        if let Some(p) = &self.paths {
            return Ok(p.clone());
        }
        let paths = Rc::new(self.store.branch_paths(&self.branch)?);
        self.paths = Some(paths.clone());
        Ok(paths)
    }

    /// References that may mean a definition named `name`: by that name, or
    /// by a local alias some file imports it under; `limit` at most.
    pub fn refs_named(&self, name: &str, limit: usize) -> Result<Vec<Ref>> {
        let mut refs = self.store.refs_named(&self.branch, name, true, limit)?;
        let aliases = self.store.import_aliases(&self.branch, name)?;
        for alias in aliases {
            if refs.len() >= limit {
                break;
            }
            let aliased = self.store.refs_named(&self.branch, &alias, false, limit - refs.len())?;
            refs.extend(aliased);
        }
        Ok(refs)
    }

    /// Resolves a symbol argument: a numeric id, `path:line` (the innermost
    /// definition there), or a name (`name`, `Container.name`, `Container::name`).
    pub fn lookup(&mut self, spec: &str) -> Result<Vec<Symbol>> {
        let spec = spec.trim();
        if !spec.is_empty() && spec.bytes().all(|b| b.is_ascii_digit()) {
            let id: i64 = spec.parse()?;
            return Ok(self.symbol(id)?.into_iter().collect());
        }
        if let Some((path, line)) = spec.rsplit_once(':') {
            if let (Ok(line), false) = (line.parse::<u32>(), path.is_empty() || path.ends_with(':')) {
                let path = path.trim_start_matches("./");
                let found = self.store.symbol_at(&self.branch, path, line)?;
                return Ok(found.into_iter().collect());
            }
        }
        let direct = self.symbols_named(spec)?;
        if !direct.is_empty() {
            // `impl Foo` blocks stand behind the definition of Foo.
            let defs: Vec<Symbol> = direct
                .iter()
                .filter(|s| s.kind != "impl")
                .map(|s| Symbol::clone(s))
                .collect();
            return Ok(if defs.is_empty() {
                direct.iter().map(|s| Symbol::clone(s)).collect()
            } else {
                defs
            });
        }
        let split = spec
            .rsplit_once("::")
            .or_else(|| spec.rsplit_once('#'))
            .or_else(|| spec.rsplit_once('.'));
        if let Some((container, name)) = split {
            let container = crate::source::extract::last_component(container).to_string();
            let named = self.symbols_named(name)?;
            return Ok(named
                .iter()
                .filter(|s| s.container.as_deref() == Some(container.as_str()))
                .map(|s| Symbol::clone(s))
                .collect());
        }
        Ok(Vec::new())
    }

    /// Exactly one symbol for `spec`, or an [`Ambiguous`] error listing them.
    pub fn lookup_one(&mut self, spec: &str) -> Result<Symbol> {
        let mut found = self.lookup(spec)?;
        // Overloads (one file, one container: Python's `@overload` stubs, Java's
        // overloaded methods) are resolved together, so any of them stands for all.
        let overloads = found
            .iter()
            .all(|s| s.file_id == found[0].file_id && s.container == found[0].container);
        match found.len() {
            0 => bail!("no definition `{spec}` on this branch (try `ken def` or `ken search`)"),
            _ if overloads => Ok(found.pop().expect("one symbol at least")),
            _ => Err(Ambiguous {
                spec: spec.to_string(),
                candidates: found,
            }
            .into()),
        }
    }

    /// Definitions by name, with optional kind and path glob filters.
    pub fn definitions(&mut self, name: &str, kind: Option<&str>, path_glob: Option<&str>) -> Result<Vec<Symbol>> {
        let glob = path_glob.map(crate::source::paths::compile_path_glob).transpose()?;
        Ok(self
            .lookup(name)?
            .into_iter()
            .filter(|s| kind.is_none_or(|k| s.kind.eq_ignore_ascii_case(k)))
            .filter(|s| glob.as_ref().is_none_or(|g| g.is_match(&s.path)))
            .collect())
    }

    pub(super) fn caller_symbol(&mut self, r: &Ref) -> Result<Symbol> {
        Ok(match r.caller {
            Some(id) => self.symbol(id)?.unwrap_or_else(|| Symbol::module_of(r)),
            None => Symbol::module_of(r),
        })
    }

    /// The edges one reference makes (none when it resolves to nothing in the
    /// repository). An ambiguous reference makes edges to its first
    /// [`MAX_CANDIDATES`] candidates; the edges carry the count.
    pub fn edges_of(&mut self, r: &Ref, depth: usize) -> Result<Vec<Edge>> {
        self.edges_to(r, depth, None)
    }

    /// The edges of `r`; with `only`, just the edge to that symbol (whatever
    /// its place among the candidates), without building the others.
    fn edges_to(&mut self, r: &Ref, depth: usize, only: Option<i64>) -> Result<Vec<Edge>> {
        let Resolution { targets, confidence } = self.resolve(r)?;
        let ambiguous = confidence == Confidence::Ambiguous;
        let chosen: Vec<&Rc<Symbol>> = match only {
            Some(id) => targets.iter().filter(|s| s.id == id).collect(),
            None if ambiguous => targets.iter().take(MAX_CANDIDATES).collect(),
            None => targets.iter().collect(),
        };
        if chosen.is_empty() {
            return Ok(Vec::new());
        }
        let from = self.caller_symbol(r)?;
        let (candidates, candidate_count): (Vec<Symbol>, usize) = if ambiguous {
            let listed = targets.iter().take(MAX_CANDIDATES).map(|s| Symbol::clone(s)).collect();
            (listed, targets.len())
        } else {
            (Vec::new(), 0)
        };
        Ok(chosen
            .into_iter()
            .map(|to| Edge {
                kind: super::resolve::edge_kind(r, to),
                from: from.clone(),
                to: Symbol::clone(to),
                confidence,
                call_site: Site {
                    path: r.path.clone(),
                    line: r.line,
                },
                depth,
                candidates: candidates.clone(),
                candidate_count,
            })
            .collect())
    }

    /// Callers or callees of `symbol` (calls, constructors, inheritance; not
    /// imports), following calls `depth` levels (ambiguous edges are reported
    /// but not followed).
    pub fn call_graph(&mut self, symbol: &Symbol, direction: Direction, depth: usize) -> Result<CallGraph> {
        let depth = depth.max(1);
        let mut edges = Vec::new();
        let mut seen: HashSet<i64> = HashSet::from([symbol.id]);
        let mut frontier = vec![symbol.clone()];
        let mut truncated = false;
        let mut note = None;
        'levels: for level in 1..=depth {
            let mut next = Vec::new();
            let mut budget = MAX_REFS_PER_LEVEL;
            for node in &frontier {
                let (found, cut) = match direction {
                    Direction::Callers => self.callers_within(node, level, &mut budget)?,
                    Direction::Callees => self.callees_within(node, level, &mut budget)?,
                };
                if cut && !truncated {
                    truncated = true;
                    note = Some(format!(
                        "stopped after {MAX_REFS_PER_LEVEL} references at depth {level}: the answer is partial"
                    ));
                }
                // Imports serve resolution; they are not calls.
                for edge in found.into_iter().filter(|e| e.kind != "import") {
                    let other = match direction {
                        Direction::Callers => &edge.from,
                        Direction::Callees => &edge.to,
                    };
                    let follow = other.id != 0
                        && edge.confidence != Confidence::Ambiguous
                        && CALL_KINDS.contains(&edge.kind.as_str());
                    if follow && seen.insert(other.id) {
                        next.push(other.clone());
                    }
                    edges.push(edge);
                    if edges.len() >= MAX_EDGES {
                        truncated = true;
                        note = Some(format!("stopped at {MAX_EDGES} edges: the answer is partial"));
                        break 'levels;
                    }
                }
                if cut {
                    break;
                }
            }
            frontier = next;
        }
        Ok(CallGraph {
            symbol: symbol.clone(),
            direction,
            depth,
            edges,
            truncated,
            note,
        })
    }

    /// Direct callers (and importers, subclasses) of `symbol`.
    pub fn callers_of(&mut self, symbol: &Symbol, depth: usize) -> Result<Vec<Edge>> {
        Ok(self.callers_within(symbol, depth, &mut { usize::MAX })?.0)
    }

    /// Direct callers, examining `max_refs` references at most (a name used
    /// everywhere must not take seconds); true when references were left unexamined.
    pub fn callers_bounded(&mut self, symbol: &Symbol, max_refs: usize) -> Result<(Vec<Edge>, bool)> {
        self.callers_within(symbol, 1, &mut { max_refs })
    }

    /// Direct callers, examining `budget` references at most (taken off the
    /// budget); true when references were left unexamined.
    fn callers_within(&mut self, symbol: &Symbol, depth: usize, budget: &mut usize) -> Result<(Vec<Edge>, bool)> {
        let limit = budget.saturating_add(1);
        let refs = self.refs_named(&symbol.name, limit)?;
        let cut = refs.len() > *budget;
        let mut out = Vec::new();
        for r in refs.iter().take(*budget) {
            out.extend(self.edges_to(r, depth, Some(symbol.id))?);
        }
        *budget -= refs.len().min(*budget);
        Ok((out, cut))
    }

    /// Direct callees (and bases, imports) of `symbol`.
    pub fn callees_of(&mut self, symbol: &Symbol, depth: usize) -> Result<Vec<Edge>> {
        Ok(self.callees_within(symbol, depth, &mut { usize::MAX })?.0)
    }

    /// Direct callees, examining `budget` references at most (taken off the
    /// budget); true when references were left unexamined.
    fn callees_within(&mut self, symbol: &Symbol, depth: usize, budget: &mut usize) -> Result<(Vec<Edge>, bool)> {
        // A definition's references are in its own file (refs are clustered by file).
        let refs = self
            .store
            .refs_of_caller(&self.branch, symbol.file_id, symbol.id, budget.saturating_add(1))?;
        let cut = refs.len() > *budget;
        let mut out = Vec::new();
        for r in refs.iter().take(*budget) {
            out.extend(self.edges_of(r, depth)?);
        }
        *budget -= refs.len().min(*budget);
        Ok((out, cut))
    }

    /// The shortest chain of calls from `from` to `to` (breadth first over
    /// callees; ambiguous edges only if no path exists without them).
    pub fn path(&mut self, from: &Symbol, to: &Symbol) -> Result<CallPath> {
        let mut truncated = false;
        let mut edges = Vec::new();
        for allow_ambiguous in [false, true] {
            let (found, cut) = self.shortest_path(from, to, allow_ambiguous)?;
            truncated |= cut;
            if let Some(found) = found {
                edges = found;
                break;
            }
        }
        Ok(CallPath {
            from: from.clone(),
            to: to.clone(),
            edges,
            truncated,
            note: truncated.then(|| {
                format!("the search stopped early ({MAX_REFS_PER_LEVEL} references per depth at most): a path may be missed")
            }),
        })
    }

    /// Breadth first over callees; true when the reference limit of a level
    /// left nodes unexpanded.
    fn shortest_path(
        &mut self,
        from: &Symbol,
        to: &Symbol,
        allow_ambiguous: bool,
    ) -> Result<(Option<Vec<Edge>>, bool)> {
        const MAX_VISITED: usize = 20_000;
        let mut came_from: HashMap<i64, Edge> = HashMap::new();
        let mut queue = VecDeque::from([(from.clone(), 0usize)]);
        let mut seen: HashSet<i64> = HashSet::from([from.id]);
        let (mut level, mut budget, mut cut) = (0, MAX_REFS_PER_LEVEL, false);
        while let Some((node, depth)) = queue.pop_front() {
            if depth >= MAX_PATH_DEPTH || seen.len() > MAX_VISITED {
                cut |= seen.len() > MAX_VISITED;
                break;
            }
            if depth != level {
                (level, budget) = (depth, MAX_REFS_PER_LEVEL);
            }
            if budget == 0 {
                cut = true;
                continue;
            }
            let (found, partial) = self.callees_within(&node, depth + 1, &mut budget)?;
            cut |= partial;
            for edge in found {
                let usable = CALL_KINDS.contains(&edge.kind.as_str())
                    && (allow_ambiguous || edge.confidence != Confidence::Ambiguous);
                if !usable || !seen.insert(edge.to.id) {
                    continue;
                }
                let next = edge.to.clone();
                came_from.insert(next.id, edge);
                if next.id == to.id {
                    let mut chain = Vec::new();
                    let mut at = to.id;
                    while at != from.id {
                        let e = came_from.remove(&at).expect("path edge recorded");
                        at = e.from.id;
                        chain.push(e);
                    }
                    chain.reverse();
                    for (i, e) in chain.iter_mut().enumerate() {
                        e.depth = i + 1;
                    }
                    return Ok((Some(chain), cut));
                }
                queue.push_back((next, depth + 1));
            }
        }
        Ok((None, cut))
    }

    /// Every definition of the branch, in path and line order.
    pub fn all_symbols(&self) -> Result<Vec<Symbol>> {
        self.store.all_symbols(&self.branch)
    }

    /// How often each file of the branch refers to each name (imports
    /// aside: the uses count), unresolved: (path, name, count).
    pub fn reference_counts(&self) -> Result<Vec<(String, String, u32)>> {
        self.store.reference_counts(&self.branch)
    }

    /// Every edge of the branch, in path and line order (for tests and benchmarks).
    pub fn all_edges(&mut self) -> Result<Vec<Edge>> {
        let refs = self.store.all_refs(&self.branch)?;
        let mut out = Vec::new();
        for r in refs {
            out.extend(self.edges_of(&r, 1)?);
        }
        Ok(out)
    }
}
