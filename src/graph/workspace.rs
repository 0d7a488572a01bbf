//! The call graph across a workspace's members: each member's own graph,
//! plus the calls one member makes into another through an import of a
//! module the other provides (its Go module, Rust crate, npm package or
//! Python package, [`crate::source::manifest`]).
//!
//! A reference links into another member only when its own member resolves
//! it to nothing (the import names a module outside it) and an import of its
//! file names a package that member provides; within that member the
//! definition is looked for in the imported module's files, else among its
//! top-level definitions of the name (a re-export). Symbol ids are per
//! index, so every symbol travels with its member's position.

use std::collections::HashSet;
use std::rc::Rc;

use anyhow::{bail, Result};

use super::query::{Direction, Edge, Graph, Site, Symbol, MAX_EDGES, MAX_REFS_PER_LEVEL};
use super::resolve::{self, family, Confidence, ModulePath};
use crate::source::manifest::Package;
use crate::store::graph::Ref;

/// One member's graph and what it provides to the others' imports.
pub struct MemberGraph<'c> {
    pub name: String,
    pub graph: Graph<'c>,
    pub packages: Vec<Package>,
}

/// An edge with the members (positions in the workspace) of its two ends.
#[derive(Debug, Clone)]
pub struct MemberEdge {
    pub edge: Edge,
    pub from_member: usize,
    pub to_member: usize,
}

/// Callers or callees across the members.
#[derive(Debug, Clone)]
pub struct CallGraphAcross {
    pub member: usize,
    pub symbol: Symbol,
    pub direction: Direction,
    pub depth: usize,
    pub edges: Vec<MemberEdge>,
    pub truncated: bool,
    pub note: Option<String>,
}

const CALL_KINDS: &[&str] = &["call", "method_call", "constructor"];

/// The members' graphs, queried together.
pub struct Members<'c> {
    pub members: Vec<MemberGraph<'c>>,
}

impl<'c> Members<'c> {
    /// The one definition `spec` names in the members (`only`: in that member).
    pub fn lookup_one(&mut self, spec: &str, only: Option<usize>) -> Result<(usize, Symbol)> {
        let mut found: Vec<(usize, Symbol)> = Vec::new();
        for (at, member) in self.members.iter_mut().enumerate() {
            if only.is_none_or(|o| o == at) {
                found.extend(member.graph.lookup(spec)?.into_iter().map(|s| (at, s)));
            }
        }
        let overloads = found
            .iter()
            .all(|(m, s)| *m == found[0].0 && s.file_id == found[0].1.file_id && s.container == found[0].1.container);
        match found.len() {
            0 => bail!("no definition `{spec}` in the workspace's members (try `ken def` or `ken search`)"),
            _ if overloads => Ok(found.pop().expect("one symbol at least")),
            n => {
                let listed: Vec<String> = found
                    .iter()
                    .take(30)
                    .map(|(m, s)| {
                        format!(
                            "  {}: {}:{}  {} {}",
                            self.members[*m].name,
                            s.path,
                            s.line,
                            s.kind,
                            s.qualified()
                        )
                    })
                    .collect();
                bail!(
                    "`{spec}` names {n} definitions; pass one as `path:line` with --member NAME:\n{}",
                    listed.join("\n")
                )
            }
        }
    }

    /// Callers or callees of `symbol` (of member `member`) to `depth` levels,
    /// within each member and across members; ambiguous edges are reported
    /// but not followed, as in one repository.
    pub fn call_graph(
        &mut self,
        member: usize,
        symbol: &Symbol,
        direction: Direction,
        depth: usize,
    ) -> Result<CallGraphAcross> {
        let depth = depth.max(1);
        let mut edges: Vec<MemberEdge> = Vec::new();
        let mut seen: HashSet<(usize, i64)> = HashSet::from([(member, symbol.id)]);
        let mut frontier = vec![(member, symbol.clone())];
        let mut note = None;
        'levels: for level in 1..=depth {
            let mut next = Vec::new();
            for (at, node) in &frontier {
                let found = self.edges_at(*at, node, direction, level, &mut note)?;
                for e in found {
                    let (other_member, other) = match direction {
                        Direction::Callers => (e.from_member, &e.edge.from),
                        Direction::Callees => (e.to_member, &e.edge.to),
                    };
                    let follow = other.id != 0
                        && e.edge.confidence != Confidence::Ambiguous
                        && CALL_KINDS.contains(&e.edge.kind.as_str());
                    if follow && seen.insert((other_member, other.id)) {
                        next.push((other_member, other.clone()));
                    }
                    edges.push(e);
                    if edges.len() >= MAX_EDGES {
                        note = Some(format!("stopped at {MAX_EDGES} edges: the answer is partial"));
                        break 'levels;
                    }
                }
            }
            frontier = next;
        }
        Ok(CallGraphAcross {
            member,
            symbol: symbol.clone(),
            direction,
            depth,
            edges,
            truncated: note.is_some(),
            note,
        })
    }

    /// The direct edges of `node` in its own member and across members.
    fn edges_at(
        &mut self,
        at: usize,
        node: &Symbol,
        direction: Direction,
        level: usize,
        note: &mut Option<String>,
    ) -> Result<Vec<MemberEdge>> {
        let own = self.members[at].graph.call_graph(node, direction, 1)?;
        if own.truncated && note.is_none() {
            *note = own.note.clone();
        }
        let mut out: Vec<MemberEdge> = own
            .edges
            .into_iter()
            .map(|mut edge| {
                edge.depth = level;
                MemberEdge {
                    edge,
                    from_member: at,
                    to_member: at,
                }
            })
            .collect();
        match direction {
            Direction::Callees => {
                let (store, branch) = self.members[at].graph.store();
                let refs = store.refs_of_caller(branch, node.file_id, node.id, MAX_REFS_PER_LEVEL)?;
                for r in &refs {
                    out.extend(self.edges_into_others(at, r, level)?);
                }
            }
            Direction::Callers => out.extend(self.callers_in_others(at, node, level)?),
        }
        Ok(out)
    }

    /// Edges from the reference `r` of member `at` into other members (none
    /// when its own member resolves it).
    fn edges_into_others(&mut self, at: usize, r: &Ref, level: usize) -> Result<Vec<MemberEdge>> {
        if !CALL_KINDS.contains(&r.kind.as_str()) && !matches!(r.kind.as_str(), "inherits" | "implements") {
            return Ok(Vec::new());
        }
        if !self.members[at].graph.resolve(r)?.targets.is_empty() {
            return Ok(Vec::new());
        }
        let Some((other, targets)) = self.foreign_targets(at, r)? else {
            return Ok(Vec::new());
        };
        let from = self.members[at].graph.caller_symbol(r)?;
        Ok(targets
            .iter()
            .map(|to| MemberEdge {
                edge: Edge {
                    kind: resolve::edge_kind(r, to),
                    from: from.clone(),
                    to: Symbol::clone(to),
                    confidence: Confidence::Import,
                    call_site: Site {
                        path: r.path.clone(),
                        line: r.line,
                    },
                    depth: level,
                    candidates: Vec::new(),
                    candidate_count: 0,
                },
                from_member: at,
                to_member: other,
            })
            .collect())
    }

    /// The references in the other members that link to `symbol` of member `at`.
    fn callers_in_others(&mut self, at: usize, symbol: &Symbol, level: usize) -> Result<Vec<MemberEdge>> {
        let mut out = Vec::new();
        for other in 0..self.members.len() {
            if other == at {
                continue;
            }
            let refs = self.members[other].graph.refs_named(&symbol.name, MAX_REFS_PER_LEVEL)?;
            for r in &refs {
                let edges = self.edges_into_others(other, r, level)?;
                out.extend(
                    edges
                        .into_iter()
                        .filter(|e| e.to_member == at && e.edge.to.id == symbol.id),
                );
            }
        }
        Ok(out)
    }

    /// The member another member's import in `r` names, and the definitions
    /// `r` means there.
    fn foreign_targets(&mut self, at: usize, r: &Ref) -> Result<Option<(usize, Vec<Rc<Symbol>>)>> {
        let fam = family(&r.language);
        for (module, wanted, through_receiver) in self.members[at].graph.imported_from(r)? {
            for other in (0..self.members.len()).filter(|&o| o != at) {
                let provided: Vec<Vec<String>> = self.members[other]
                    .packages
                    .iter()
                    .filter(|p| p.family == fam)
                    .filter_map(|p| p.module_dirs(&module))
                    .collect();
                for comps in provided {
                    let named = self.members[other].graph.family_named(&wanted, fam)?;
                    let keep = |s: &Symbol| resolve::fits(r, s) && !(through_receiver && s.kind == "method");
                    let module_path = ModulePath { comps, anchored: true };
                    let mut found: Vec<Rc<Symbol>> = named
                        .iter()
                        .filter(|s| keep(s) && module_path.matches(&s.path))
                        .cloned()
                        .collect();
                    if found.is_empty() {
                        found = named
                            .iter()
                            .filter(|s| keep(s) && s.container.is_none())
                            .cloned()
                            .collect();
                    }
                    if !found.is_empty() {
                        return Ok(Some((other, found)));
                    }
                }
            }
        }
        Ok(None)
    }
}
