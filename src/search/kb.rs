//! Knowledge bases: extra folders (docs, another repository) indexed beside
//! the project and searched with it.
//!
//! The registry is `knowledge_bases.json` in the project's index folder; each
//! base has its own index under `kb/<name>/` there, so nothing is written
//! into the base's folder. System and secret locations are refused.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::config::DEFAULT_RRF_K;
use crate::search::confidence::Confidence;
use crate::search::{SearchHit, SearchRequest, Searcher};

/// A result with the name of the base it comes from.
pub type BaseHit = (String, SearchHit);

/// The name results of the project itself carry.
pub const PROJECT: &str = "project";
const REGISTRY: &str = "knowledge_bases.json";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KnowledgeBase {
    pub name: String,
    /// Absolute, canonical folder.
    pub path: String,
    pub added_at: String,
}

impl KnowledgeBase {
    pub fn root(&self) -> &Path {
        Path::new(&self.path)
    }

    /// Where this base's own index lives, inside the project's index folder.
    pub fn index_dir(&self, project_index_dir: &Path) -> PathBuf {
        project_index_dir.join("kb").join(&self.name)
    }
}

pub fn list(project_index_dir: &Path) -> Result<Vec<KnowledgeBase>> {
    let path = project_index_dir.join(REGISTRY);
    match std::fs::read_to_string(&path) {
        Ok(text) => serde_json::from_str(&text).with_context(|| format!("{} is not a valid registry", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

fn save(project_index_dir: &Path, bases: &[KnowledgeBase]) -> Result<()> {
    std::fs::create_dir_all(project_index_dir)?;
    let path = project_index_dir.join(REGISTRY);
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, serde_json::to_string_pretty(bases)?)?;
    std::fs::rename(&tmp, &path).with_context(|| format!("writing {}", path.display()))
}

/// Checks a folder an MCP client asks to add: it must be inside `permitted`
/// (the roots the client declared and the folders the user allowed, all
/// canonical) and be named without a symbolic link on the way, so an agent
/// cannot widen what ken reads. `ken kb add` is the user's own act and is not
/// checked so.
pub fn check_client_may_add(folder: &Path, permitted: &[PathBuf], settings_file: Option<&Path>) -> Result<()> {
    let mut walked = PathBuf::new();
    for part in folder.components() {
        match part {
            std::path::Component::ParentDir => {
                walked.pop();
            }
            std::path::Component::CurDir => {}
            other => {
                walked.push(other);
                if walked.symlink_metadata().is_ok_and(|m| m.file_type().is_symlink()) {
                    bail!(
                        "refusing {}: {} is a symbolic link, and knowledge bases are never added through one over \
                         MCP; give the folder's real path",
                        folder.display(),
                        walked.display()
                    );
                }
            }
        }
    }
    let canonical = walked
        .canonicalize()
        .with_context(|| format!("{}: no such folder", folder.display()))?;
    if permitted.iter().any(|p| canonical.starts_with(p)) {
        return Ok(());
    }
    let listed: Vec<String> = permitted.iter().map(|p| p.display().to_string()).collect();
    let settings = settings_file.map_or("the settings file".to_string(), |f| f.display().to_string());
    bail!(
        "refusing {}: an MCP client may add knowledge bases only inside the roots it declares or the folders the \
         user allowed ({}). To allow it, the user runs `ken kb add {}` themselves, lists it under \
         [knowledge_bases] allow in {settings}, or starts the server with `ken serve --allow-kb {}`",
        canonical.display(),
        if listed.is_empty() {
            "none".to_string()
        } else {
            listed.join(", ")
        },
        canonical.display(),
        canonical.display()
    )
}

/// Registers `folder` under `name` (default: the folder's name). Does not index it.
pub fn add(project_root: &Path, project_index_dir: &Path, folder: &Path, name: Option<&str>) -> Result<KnowledgeBase> {
    let folder = allowed_folder(folder)?;
    let project_root = project_root
        .canonicalize()
        .unwrap_or_else(|_| project_root.to_path_buf());
    if folder.starts_with(&project_root) {
        bail!(
            "{} is inside the project ({}), which is indexed already",
            folder.display(),
            project_root.display()
        );
    }
    let name = match name {
        Some(n) => n.to_string(),
        None => default_name(&folder),
    };
    check_name(&name)?;
    let mut bases = list(project_index_dir)?;
    if let Some(existing) = bases.iter().find(|b| b.name == name) {
        bail!(
            "a knowledge base named `{name}` exists already ({}); remove it first or choose another name",
            existing.path
        );
    }
    if let Some(existing) = bases.iter().find(|b| b.root() == folder) {
        bail!("{} is already the knowledge base `{}`", folder.display(), existing.name);
    }
    let base = KnowledgeBase {
        name,
        path: folder.display().to_string(),
        added_at: crate::store::now_rfc3339(),
    };
    bases.push(base.clone());
    save(project_index_dir, &bases)?;
    Ok(base)
}

/// Unregisters `name` and deletes its index (never the folder itself).
pub fn remove(project_index_dir: &Path, name: &str) -> Result<KnowledgeBase> {
    let mut bases = list(project_index_dir)?;
    let Some(at) = bases.iter().position(|b| b.name == name) else {
        let names: Vec<&str> = bases.iter().map(|b| b.name.as_str()).collect();
        bail!("no knowledge base named `{name}` (there are: {})", names.join(", "));
    };
    let base = bases.remove(at);
    save(project_index_dir, &bases)?;
    let dir = base.index_dir(project_index_dir);
    if dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("deleting {}", dir.display()))?;
    }
    Ok(base)
}

fn default_name(folder: &Path) -> String {
    crate::source::workspace::folder_name(folder, "kb")
}

fn check_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        && name != PROJECT;
    if !ok {
        bail!("`{name}` is not a usable knowledge base name: use 1-64 letters, digits, `-` or `_` (and not `project`)");
    }
    Ok(())
}

/// Canonical `folder` if it may be indexed: an existing directory that is
/// not the filesystem root, the home directory or one of its ancestors, a
/// system folder or a folder of secrets.
pub fn allowed_folder(folder: &Path) -> Result<PathBuf> {
    let canonical = folder
        .canonicalize()
        .with_context(|| format!("{}: no such folder", folder.display()))?;
    if !canonical.is_dir() {
        bail!("{} is not a folder", canonical.display());
    }
    let refuse = |why: &str| -> Result<PathBuf> {
        bail!(
            "refusing to index {}: {why}. Choose the project or documentation folder itself",
            canonical.display()
        )
    };
    if canonical.parent().is_none() {
        return refuse("it is the filesystem root");
    }
    const SYSTEM: [&str; 8] = [
        "/etc",
        "/proc",
        "/sys",
        "/dev",
        "/boot",
        "/run",
        "/var/lib",
        "/private/etc",
    ];
    if SYSTEM.iter().any(|s| canonical.starts_with(s)) {
        return refuse("it is a system folder");
    }
    if let Some(home) = dirs::home_dir().and_then(|h| h.canonicalize().ok()) {
        if home.starts_with(&canonical) {
            return refuse("it is the home directory or contains it");
        }
        const SECRETS: [&str; 9] = [
            ".ssh",
            ".aws",
            ".gnupg",
            ".kube",
            ".docker",
            ".azure",
            ".password-store",
            ".config/gcloud",
            ".netrc",
        ];
        if SECRETS.iter().any(|s| canonical.starts_with(home.join(s))) {
            return refuse("it holds credentials");
        }
    }
    Ok(canonical)
}

/// One result list per base, in order of preference (the project first).
pub struct BaseHits {
    pub base: String,
    pub hits: Vec<SearchHit>,
    /// Scales the list's reciprocal ranks (1 for knowledge bases).
    pub weight: f64,
}

/// Merges per-base result lists by reciprocal rank: each base's best result
/// ranks with the others' best, and scores from different indexes (whose
/// statistics differ) are never compared directly. Ties keep base order.
pub fn fuse(lists: Vec<BaseHits>, limit: usize) -> Vec<BaseHit> {
    let mut all: Vec<(f64, usize, usize, String, SearchHit)> = Vec::new();
    for (base_rank, list) in lists.into_iter().enumerate() {
        for (rank, hit) in list.hits.into_iter().enumerate() {
            let fused = list.weight / (DEFAULT_RRF_K + rank as f64 + 1.0);
            all.push((fused, base_rank, rank, list.base.clone(), hit));
        }
    }
    all.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
    all.into_iter()
        .take(limit)
        .map(|(_, _, _, base, hit)| (base, hit))
        .collect()
}

/// What [`search_all`] found.
pub struct Found {
    pub hits: Vec<BaseHit>,
    /// Why some of it could not be searched as asked.
    pub notices: Vec<String>,
    /// That of the base with the strongest match: one strong list is a match.
    pub confidence: Confidence,
}

/// Searches the project (if `include_project`) and the given knowledge bases;
/// a base whose search fails is reported in the returned notices.
pub fn search_all(
    project: &Searcher,
    bases: &[(KnowledgeBase, &Searcher)],
    req: &SearchRequest,
    include_project: bool,
) -> Result<Found> {
    let mut lists = Lists::default();
    if include_project {
        let (hits, confidence) = project.search_rated(req)?;
        lists.push(PROJECT, hits, confidence, 1.0);
        lists.notices.extend(project.notice());
    }
    for (base, searcher) in bases {
        match searcher.search_rated(req) {
            Ok((hits, confidence)) => lists.push(&base.name, hits, confidence, 1.0),
            Err(e) => lists.notices.push(format!("knowledge base `{}`: {e:#}", base.name)),
        }
    }
    Ok(lists.fused(req.limit))
}

/// Searches a workspace's members (in the workspace's order) as one list,
/// each hit under its member's name. Their BM25 statistics and vector
/// neighbourhoods differ per index, so raw scores are never compared across
/// members: the lists are merged by reciprocal rank ([`fuse`]), each list's
/// ranks scaled by its confidence score (the share of the query's weighted
/// terms its best hits hold, 0..1, normalised within its own index, so
/// comparable), so a member that barely matches ranks below one that
/// matches well. Ties go to the member listed first, then to the better
/// rank: the merge is deterministic. A member whose search fails is said in
/// the notices; if every member fails, so does the search.
pub fn search_members(members: &[(&str, &Searcher)], req: &SearchRequest) -> Result<Found> {
    let mut lists = Lists::default();
    let mut failed = None;
    for (name, searcher) in members {
        match searcher.search_rated(req) {
            Ok((hits, confidence)) => {
                // A floor keeps a weak member's results in the list, below the others.
                let weight = confidence.score.clamp(MIN_MEMBER_WEIGHT, 1.0);
                lists.push(name, hits, confidence, weight);
                lists
                    .notices
                    .extend(searcher.notice().map(|n| format!("member `{name}`: {n}")));
            }
            Err(e) => {
                lists.notices.push(format!("member `{name}` is not searched: {e:#}"));
                failed = Some(e);
            }
        }
    }
    match (lists.lists.is_empty(), failed) {
        (true, Some(e)) => Err(e),
        _ => Ok(lists.fused(req.limit)),
    }
}

/// The least a member's list is scaled by (see [`search_members`]).
const MIN_MEMBER_WEIGHT: f64 = 0.05;

/// Result lists gathered from several indexes, to fuse.
#[derive(Default)]
struct Lists {
    lists: Vec<BaseHits>,
    notices: Vec<String>,
    confidences: Vec<Confidence>,
}

impl Lists {
    fn push(&mut self, base: &str, hits: Vec<SearchHit>, confidence: Confidence, weight: f64) {
        self.lists.push(BaseHits {
            base: base.to_string(),
            hits,
            weight,
        });
        self.confidences.push(confidence);
    }

    fn fused(self, limit: usize) -> Found {
        let confidence = self
            .confidences
            .into_iter()
            .reduce(|a, b| if b.score > a.score { b } else { a })
            .unwrap_or_else(Confidence::none);
        Found {
            hits: fuse(self.lists, limit),
            notices: self.notices,
            confidence,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_and_secret_folders_are_refused() {
        for p in ["/", "/etc", "/proc/self"] {
            let err = allowed_folder(Path::new(p)).unwrap_err().to_string();
            assert!(err.contains("refusing"), "{p}: {err}");
        }
        if let Some(home) = dirs::home_dir() {
            let err = allowed_folder(&home).unwrap_err().to_string();
            assert!(err.contains("home directory"), "{err}");
            let ssh = home.join(".ssh");
            if ssh.is_dir() {
                assert!(allowed_folder(&ssh).unwrap_err().to_string().contains("credentials"));
            }
        }
        let missing = allowed_folder(Path::new("/no/such/folder/anywhere"))
            .unwrap_err()
            .to_string();
        assert!(missing.contains("no such folder"), "{missing}");
    }

    #[test]
    fn add_list_remove_round_trip_and_names_are_checked() {
        let tmp = tempfile::tempdir().unwrap();
        let project = tmp.path().join("project");
        let docs = tmp.path().join("my docs");
        std::fs::create_dir_all(&project).unwrap();
        std::fs::create_dir_all(&docs).unwrap();
        let index_dir = project.join(".ken");
        let base = add(&project, &index_dir, &docs, None).unwrap();
        assert_eq!(base.name, "my-docs");
        assert_eq!(list(&index_dir).unwrap(), vec![base.clone()]);
        assert!(
            add(&project, &index_dir, &docs, Some("again")).is_err(),
            "same folder twice"
        );
        assert!(
            add(&project, &index_dir, &project.join("."), Some("self")).is_err(),
            "inside the project"
        );
        assert!(add(&project, &index_dir, &docs, Some("../x")).is_err(), "bad name");
        std::fs::create_dir_all(base.index_dir(&index_dir)).unwrap();
        remove(&index_dir, "my-docs").unwrap();
        assert!(list(&index_dir).unwrap().is_empty());
        assert!(!base.index_dir(&index_dir).exists());
        assert!(docs.exists(), "the folder itself is never touched");
        assert!(remove(&index_dir, "my-docs")
            .unwrap_err()
            .to_string()
            .contains("no knowledge base"));
    }

    #[test]
    fn fusion_interleaves_bases_by_rank() {
        let hit = |path: &str| SearchHit {
            path: path.to_string(),
            ..SearchHit::default()
        };
        let fused = fuse(
            vec![
                BaseHits {
                    base: "project".into(),
                    hits: vec![hit("a"), hit("b")],
                    weight: 1.0,
                },
                BaseHits {
                    base: "docs".into(),
                    hits: vec![hit("x"), hit("y")],
                    weight: 1.0,
                },
            ],
            3,
        );
        let order: Vec<(&str, &str)> = fused.iter().map(|(b, h)| (b.as_str(), h.path.as_str())).collect();
        assert_eq!(order, vec![("project", "a"), ("docs", "x"), ("project", "b")]);
    }
}
