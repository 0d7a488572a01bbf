//! Resolution: which definitions a reference means, and how sure that is.
//!
//! Done at query time against the definitions visible on the branch, so it is
//! always branch-correct. The closest match wins: the method's own receiver
//! or a named type (`self.f()`, `Foo::f()`), the same file, a file the
//! referencing file imports (through aliases), the same directory (package),
//! a unique name in the repository; several candidates at the best level make
//! the edge `ambiguous`, with the candidates listed. A call through an import
//! of a module outside the repository resolves to nothing.

use std::rc::Rc;

use super::query::{Graph, Ref, Symbol};
use crate::source::extract::{module_name, CONTAINER_KINDS, SELF_WORDS};
use anyhow::Result;

/// How a reference was tied to its definition, from surest to least sure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Confidence {
    /// Through the receiver: the method's own object or a named type.
    Receiver,
    /// A definition in the same file.
    Local,
    /// Through an import of the referencing file.
    Import,
    /// A definition in the same directory (package).
    Package,
    /// The only definition of that name in the repository.
    Unique,
    /// One of several definitions of that name; the edge lists them.
    Ambiguous,
}

impl Confidence {
    pub fn as_str(self) -> &'static str {
        match self {
            Confidence::Receiver => "receiver",
            Confidence::Local => "local",
            Confidence::Import => "import",
            Confidence::Package => "package",
            Confidence::Unique => "unique",
            Confidence::Ambiguous => "ambiguous",
        }
    }
}

/// The definitions a reference resolves to (none: outside the repository).
pub struct Resolution {
    /// Shared with the per-name cache: resolving never copies a definition.
    pub targets: Rc<Vec<Rc<Symbol>>>,
    pub confidence: Confidence,
}

impl Resolution {
    fn none() -> Resolution {
        Resolution {
            targets: Rc::new(Vec::new()),
            confidence: Confidence::Unique,
        }
    }

    /// `set` found at one level: overloads (one file, one container) are all
    /// meant; definitions in different places make the reference ambiguous.
    fn at(set: Vec<Rc<Symbol>>, confidence: Confidence) -> Resolution {
        let same_place = set
            .iter()
            .all(|s| s.file_id == set[0].file_id && s.container == set[0].container);
        Resolution {
            confidence: if same_place { confidence } else { Confidence::Ambiguous },
            targets: Rc::new(set),
        }
    }
}

/// What an import says about a name.
enum ImportHit {
    Found(Resolution),
    /// Imported from a module outside the repository.
    External,
    NotImported,
}

const CALLABLE: &[&str] = &["function", "method", "macro"];
const CONSTRUCTIBLE: &[&str] = &["class", "struct", "object", "record"];
const TYPES: &[&str] = &[
    "class",
    "struct",
    "interface",
    "trait",
    "object",
    "enum",
    "union",
    "type",
    "record",
];

/// Languages whose code can call each other's definitions.
pub(super) fn family(language: &str) -> &str {
    match language {
        "javascript" | "typescript" | "tsx" | "vue" | "svelte" => "js",
        "c" | "cpp" => "c",
        other => other,
    }
}

/// The kind of an edge from the reference and what it resolved to.
pub fn edge_kind(r: &Ref, to: &Symbol) -> String {
    let kind = match r.kind.as_str() {
        "call" | "method_call" | "constructor" if CONSTRUCTIBLE.contains(&to.kind.as_str()) => "constructor",
        "call" | "method_call" | "constructor" if to.kind == "method" => "method_call",
        "call" | "method_call" | "constructor" => "call",
        // C# lists base class and interfaces together.
        "inherits" if to.kind == "interface" => "implements",
        other => other,
    };
    kind.to_string()
}

/// A module named by an import, as path components.
pub(super) struct ModulePath {
    pub(super) comps: Vec<String>,
    /// Resolved relative to the importing file: must match exactly.
    pub(super) anchored: bool,
}

const MODULE_FILE_STEMS: &[&str] = &["__init__", "index", "mod"];

impl ModulePath {
    /// In a Rust integration test, bench or example, `mycrate::a::b` names
    /// the package's own library: its `src/a/b`. None elsewhere.
    fn crate_root(importer: &str, language: &str, module: &str) -> Option<ModulePath> {
        if language != "rust" {
            return None;
        }
        let dir: Vec<&str> = importer.split('/').collect();
        let pos = dir[..dir.len().saturating_sub(1)]
            .iter()
            .position(|c| matches!(*c, "tests" | "benches" | "examples"))?;
        let parts: Vec<&str> = module.split("::").filter(|c| !c.is_empty()).collect();
        let first = parts.first()?;
        if matches!(*first, "crate" | "self" | "super" | "std" | "core" | "alloc") {
            return None;
        }
        let mut comps: Vec<String> = dir[..pos].iter().map(|c| c.to_string()).collect();
        comps.push("src".to_string());
        comps.extend(parts[1..].iter().map(|c| c.to_string()));
        Some(ModulePath { comps, anchored: true })
    }

    fn new(importer: &str, language: &str, module: &str) -> ModulePath {
        let mut dir: Vec<String> = importer.split('/').map(str::to_string).collect();
        dir.pop();
        let m = module.trim();
        if language == "python" && m.starts_with('.') {
            let dots = m.chars().take_while(|&c| c == '.').count();
            for _ in 1..dots {
                dir.pop();
            }
            dir.extend(m[dots..].split('.').filter(|c| !c.is_empty()).map(str::to_string));
            return ModulePath {
                comps: dir,
                anchored: true,
            };
        }
        let path_like = matches!(family(language), "js" | "c" | "ruby" | "go");
        if path_like && (m.starts_with("./") || m.starts_with("../")) {
            for part in m.split('/') {
                match part {
                    "." | "" => {}
                    ".." => {
                        dir.pop();
                    }
                    p => dir.push(p.to_string()),
                }
            }
            if let Some(last) = dir.last_mut() {
                *last = module_name(last).to_string();
            }
            return ModulePath {
                comps: dir,
                anchored: true,
            };
        }
        let parts: Vec<&str> = if path_like {
            m.split('/').collect()
        } else {
            m.split(['.', '/', ':', '\\']).collect()
        };
        let mut comps: Vec<String> = parts
            .into_iter()
            .filter(|c| !c.is_empty())
            .skip_while(|c| matches!(*c, "crate" | "self" | "super" | "@" | "~"))
            .map(str::to_string)
            .collect();
        if let Some(last) = comps.last_mut() {
            *last = module_name(last).to_string();
        }
        ModulePath { comps, anchored: false }
    }

    /// Whether the file at `path` is this module, or in this package.
    pub(super) fn matches(&self, path: &str) -> bool {
        if self.comps.is_empty() {
            return false;
        }
        let mut dir: Vec<&str> = path.split('/').collect();
        let file = dir.pop().unwrap_or("");
        let stem = file.split('.').next().unwrap_or(file);
        let mut as_file = dir.clone();
        if !MODULE_FILE_STEMS.contains(&stem) {
            as_file.push(stem);
        }
        let comps: Vec<&str> = self.comps.iter().map(String::as_str).collect();
        if self.anchored {
            return as_file == comps || dir == comps;
        }
        as_file.ends_with(&comps)
            || dir.ends_with(&comps)
            || (!dir.is_empty() && comps.ends_with(&dir))
            || (!as_file.is_empty() && comps.ends_with(&as_file))
    }
}

/// The names an import binds in the importing file.
fn local_names(imp: &Ref) -> Vec<&str> {
    if let Some(alias) = &imp.alias {
        return vec![alias.as_str()];
    }
    match &imp.module {
        // Python's `import a.b` binds `a` as well.
        Some(m) if module_only(imp) && imp.language == "python" => {
            vec![imp.name.as_str(), m.as_str(), m.split('.').next().unwrap_or(m)]
        }
        Some(m) if module_only(imp) => vec![imp.name.as_str(), m.as_str()],
        _ => vec![imp.name.as_str()],
    }
}

/// What the import `imp` gives the name `local` of the reference `r` (its
/// receiver or its own name): the module as imported, the module the name
/// comes from and the name wanted there.
fn binding<'i>(r: &Ref, imp: &'i Ref, local: &str) -> Option<(&'i str, String, String)> {
    let is_receiver = r.receiver.as_deref() == Some(local);
    let separator = if family(&r.language) == "python" { "." } else { "/" };
    // The receiver may go further into the module: `flask.helpers.f()`.
    let bound = local_names(imp)
        .into_iter()
        .find(|&n| n == local || (is_receiver && local.strip_prefix(n).is_some_and(|rest| rest.starts_with('.'))))?;
    let module = imp.module.as_deref()?;
    let deeper = local[bound.len()..].trim_start_matches('.').replace('.', separator);
    // `from pkg import mod; mod.f()`: the module is pkg/mod.
    let (mut module_text, wanted) = match (is_receiver, module_only(imp)) {
        (true, false) => (format!("{module}{separator}{}", imp.name), r.name.clone()),
        // `import a.b` then `a.f()`: the module is `a`.
        (true, true) if imp.alias.is_none() && module.starts_with(&format!("{bound}.")) => {
            (bound.to_string(), r.name.clone())
        }
        (true, true) => (module.to_string(), r.name.clone()),
        (false, _) => (module.to_string(), imp.name.clone()),
    };
    if !deeper.is_empty() {
        module_text = format!("{module_text}{separator}{deeper}");
    }
    Some((module, module_text, wanted))
}

/// Whether `s` is what a reference of `r`'s kind can mean.
pub(super) fn fits(r: &Ref, s: &Symbol) -> bool {
    let kind = s.kind.as_str();
    match r.kind.as_str() {
        "call" => CALLABLE.contains(&kind) || CONSTRUCTIBLE.contains(&kind),
        "method_call" => CALLABLE.contains(&kind),
        "constructor" => CONSTRUCTIBLE.contains(&kind),
        "inherits" | "implements" => TYPES.contains(&kind),
        _ => false,
    }
}

/// `import a.b` / `#include "x.h"` rather than `from a import b`.
fn module_only(imp: &Ref) -> bool {
    imp.module.as_deref().is_some_and(|m| module_name(m) == imp.name)
}

fn dir_of(path: &str) -> &str {
    path.rsplit_once('/').map_or("", |(d, _)| d)
}

impl Graph<'_> {
    /// The definitions `r` refers to.
    pub fn resolve(&mut self, r: &Ref) -> Result<Resolution> {
        match r.kind.as_str() {
            "import" => self.resolve_import(r),
            "inherits" | "implements" => self.by_scope(r, &|s: &Symbol| TYPES.contains(&s.kind.as_str())),
            "constructor" => {
                let keep = |s: &Symbol| CONSTRUCTIBLE.contains(&s.kind.as_str());
                if let Some(recv) = r.receiver.clone() {
                    match self.through_import(r, &recv, &keep)? {
                        ImportHit::Found(res) => return Ok(res),
                        ImportHit::External => return Ok(Resolution::none()),
                        ImportHit::NotImported => {}
                    }
                }
                self.by_scope(r, &keep)
            }
            "call" => {
                let container = self.caller_container(r)?;
                let file_id = r.file_id;
                // A method is called without a receiver only from its own class.
                let keep = move |s: &Symbol| {
                    (CALLABLE.contains(&s.kind.as_str()) || CONSTRUCTIBLE.contains(&s.kind.as_str()))
                        && (s.kind != "method" || (s.file_id == file_id && s.container == container))
                };
                self.by_scope(r, &keep)
            }
            "method_call" => self.resolve_method_call(r),
            _ => Ok(Resolution::none()),
        }
    }

    /// Candidates named `name` in the language family of `r` that `keep` accepts.
    fn candidates(&mut self, r: &Ref, name: &str, keep: &dyn Fn(&Symbol) -> bool) -> Result<Vec<Rc<Symbol>>> {
        Ok(self
            .family_named(name, family(&r.language))?
            .iter()
            .filter(|s| keep(s))
            .cloned()
            .collect())
    }

    /// The class (or other container) whose code makes the reference.
    fn caller_container(&mut self, r: &Ref) -> Result<Option<String>> {
        let Some(id) = r.caller else { return Ok(None) };
        Ok(self.symbol(id)?.and_then(|s| {
            if CONTAINER_KINDS.contains(&s.kind.as_str()) {
                Some(s.name)
            } else {
                s.container
            }
        }))
    }

    /// Same file, then imports, then same directory, then a unique name.
    fn by_scope(&mut self, r: &Ref, keep: &dyn Fn(&Symbol) -> bool) -> Result<Resolution> {
        let cands = self.candidates(r, &r.name, keep)?;
        let local: Vec<Rc<Symbol>> = cands.iter().filter(|s| s.file_id == r.file_id).cloned().collect();
        if !local.is_empty() {
            let container = self.caller_container(r)?;
            let closest: Vec<Rc<Symbol>> = local.iter().filter(|s| s.container == container).cloned().collect();
            return Ok(Resolution::at(
                if closest.is_empty() { local } else { closest },
                Confidence::Local,
            ));
        }
        match self.through_import(r, &r.name.clone(), keep)? {
            ImportHit::Found(res) => return Ok(res),
            ImportHit::External => return Ok(Resolution::none()),
            ImportHit::NotImported => {}
        }
        Ok(self.beyond_imports(r, cands))
    }

    /// Same directory, then a unique name, else ambiguous.
    fn beyond_imports(&self, r: &Ref, cands: Vec<Rc<Symbol>>) -> Resolution {
        let dir = dir_of(&r.path);
        let package: Vec<Rc<Symbol>> = cands.iter().filter(|s| dir_of(&s.path) == dir).cloned().collect();
        if !package.is_empty() {
            return Resolution::at(package, Confidence::Package);
        }
        match cands.len() {
            0 => Resolution::none(),
            1 => Resolution::at(cands, Confidence::Unique),
            _ => Resolution::at(cands, Confidence::Ambiguous),
        }
    }

    /// A name (or receiver) bound by an import of the referencing file: the
    /// definitions of `r.name` in the imported module.
    fn through_import(&mut self, r: &Ref, local: &str, keep: &dyn Fn(&Symbol) -> bool) -> Result<ImportHit> {
        let imports = self.imports_of(r.file_id)?;
        let is_receiver = r.receiver.as_deref() == Some(local);
        for imp in imports.iter() {
            let Some((module, module_text, wanted)) = binding(r, imp, local) else {
                continue;
            };
            let path = ModulePath::new(&r.path, &r.language, &module_text);
            let own = ModulePath::crate_root(&r.path, &r.language, &module_text);
            for module_path in std::iter::once(&path).chain(own.as_ref()) {
                // What a module gives is module-level, never a method.
                let found: Vec<Rc<Symbol>> = self
                    .in_module(r, &wanted, module_path)?
                    .iter()
                    .filter(|s| keep(s) && !(is_receiver && s.kind == "method"))
                    .cloned()
                    .collect();
                if !found.is_empty() {
                    return Ok(ImportHit::Found(Resolution::at(found, Confidence::Import)));
                }
            }
            // `import static a.B.m;` (Java, Kotlin, Scala): the module names a
            // class's member, called without a receiver.
            if !is_receiver && module_only(imp) {
                if let Some((class_module, _)) = module.rsplit_once(['.', '/']) {
                    let class = module_name(class_module).to_string();
                    let class_path = ModulePath::new(&r.path, &r.language, class_module);
                    let found: Vec<Rc<Symbol>> = self
                        .in_module(r, &wanted, &class_path)?
                        .iter()
                        .filter(|s| s.kind == "method" && s.container.as_deref() == Some(class.as_str()))
                        .cloned()
                        .collect();
                    if !found.is_empty() {
                        return Ok(ImportHit::Found(Resolution::at(found, Confidence::Import)));
                    }
                }
            }
            // Imported from a module of the repository that does not define it
            // (a re-export): fall back to the other levels.
            let plain = ModulePath::new(&r.path, &r.language, module);
            if !self.in_repository(&path)? && !self.in_repository(&plain)? {
                return Ok(ImportHit::External);
            }
        }
        Ok(ImportHit::NotImported)
    }

    /// Where the imports of `r`'s file say its name comes from: (the module,
    /// the name wanted there, whether through the receiver). A Rust path
    /// call (`lib::util::f()`) names its module itself.
    pub(super) fn imported_from(&mut self, r: &Ref) -> Result<Vec<(String, String, bool)>> {
        let local = r.receiver.clone().unwrap_or_else(|| r.name.clone());
        let through_receiver = r.receiver.is_some();
        let mut out: Vec<(String, String, bool)> = self
            .imports_of(r.file_id)?
            .iter()
            .filter_map(|imp| binding(r, imp, &local))
            .map(|(_, module, wanted)| (module, wanted, through_receiver))
            .collect();
        if r.language == "rust" && local.contains("::") {
            out.push((local, r.name.clone(), true));
        }
        Ok(out)
    }

    /// Definitions named `name` (in the family of `r`) in the files of
    /// `module`: matched once per query for a name and module.
    fn in_module(&mut self, r: &Ref, name: &str, module: &ModulePath) -> Result<Rc<Vec<Rc<Symbol>>>> {
        let fam = family(&r.language);
        let key = format!("{fam}\0{name}\0{}{}", module.anchored, module.comps.join("/"));
        if let Some(found) = self.in_module_cache.get(&key) {
            return Ok(found.clone());
        }
        let found: Vec<Rc<Symbol>> = self
            .family_named(name, fam)?
            .iter()
            .filter(|s| module.matches(&s.path))
            .cloned()
            .collect();
        let found = Rc::new(found);
        self.in_module_cache.insert(key, found.clone());
        Ok(found)
    }

    fn in_repository(&mut self, module: &ModulePath) -> Result<bool> {
        let key = format!("{}{}", module.anchored, module.comps.join("/"));
        if let Some(&known) = self.module_cache.get(&key) {
            return Ok(known);
        }
        let found = self.branch_paths()?.iter().any(|p| module.matches(p));
        self.module_cache.insert(key, found);
        Ok(found)
    }

    fn resolve_import(&mut self, r: &Ref) -> Result<Resolution> {
        let Some(module) = r.module.as_deref() else {
            return Ok(Resolution::none());
        };
        let path = ModulePath::new(&r.path, &r.language, module);
        let own = ModulePath::crate_root(&r.path, &r.language, module);
        let candidates = self.candidates(r, &r.name, &|s: &Symbol| s.container.is_none())?;
        let mut found: Vec<Rc<Symbol>> = candidates.iter().filter(|s| path.matches(&s.path)).cloned().collect();
        if let (true, Some(own)) = (found.is_empty(), own) {
            found = candidates.into_iter().filter(|s| own.matches(&s.path)).collect();
        }
        Ok(match found.is_empty() {
            true => Resolution::none(),
            false => Resolution::at(found, Confidence::Import),
        })
    }

    fn resolve_method_call(&mut self, r: &Ref) -> Result<Resolution> {
        let recv = r.receiver.as_deref().unwrap_or("").trim().to_string();
        let callable = |s: &Symbol| CALLABLE.contains(&s.kind.as_str());
        // The method's own object: a method of the same class (or type).
        if SELF_WORDS.contains(&recv.as_str()) {
            if let Some(container) = self.caller_container(r)? {
                let own = self.candidates(r, &r.name, &|s: &Symbol| {
                    callable(s) && s.container.as_deref() == Some(container.as_str())
                })?;
                if let Some(res) = self.pick_own(r, own) {
                    return Ok(res);
                }
            }
        } else {
            match self.through_import(r, &recv, &callable)? {
                ImportHit::Found(res) => return Ok(res),
                ImportHit::External => return Ok(Resolution::none()),
                ImportHit::NotImported => {}
            }
            // A named type: `Foo::new()`, `Foo.create()`.
            let type_name = recv.rsplit(['.', ':']).next().unwrap_or("").to_string();
            let is_name = !type_name.is_empty() && type_name.chars().all(|c| c.is_alphanumeric() || c == '_');
            if is_name {
                let is_type = type_name.starts_with(|c: char| c.is_uppercase())
                    || !self
                        .candidates(r, &type_name, &|s: &Symbol| TYPES.contains(&s.kind.as_str()))?
                        .is_empty();
                if is_type {
                    // Methods of that type, or nothing: `String::new()` is not
                    // some other type's `new`.
                    let own = self.candidates(r, &r.name, &|s: &Symbol| {
                        callable(s) && s.container.as_deref() == Some(type_name.as_str())
                    })?;
                    return Ok(self.pick_own(r, own).unwrap_or_else(Resolution::none));
                }
            }
            // Rust paths to modules: `util::helper()`.
            if r.language == "rust" && recv.chars().all(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                let path = ModulePath::new(&r.path, &r.language, &recv);
                let found: Vec<Rc<Symbol>> = self
                    .candidates(r, &r.name, &|s: &Symbol| callable(s) && s.container.is_none())?
                    .into_iter()
                    .filter(|s| path.matches(&s.path))
                    .collect();
                if !found.is_empty() {
                    return Ok(Resolution::at(found, Confidence::Import));
                }
            }
        }
        // An object of unknown type: any method of that name (for `super`, of
        // another class than the caller's).
        let own = match recv.as_str() {
            "super" => self.caller_container(r)?,
            _ => None,
        };
        // The same for every such reference to the name: resolved once per query.
        let key = (r.name.clone(), family(&r.language).to_string(), own.clone());
        if let Some(known) = self.method_cache.get(&key) {
            return Ok(Resolution {
                targets: known.targets.clone(),
                confidence: known.confidence,
            });
        }
        let methods = self.candidates(r, &r.name, &|s: &Symbol| {
            callable(s) && s.container.is_some() && (own.is_none() || s.container != own)
        })?;
        let res = match methods.len() {
            0 => Resolution::none(),
            _ => Resolution::at(methods, Confidence::Unique),
        };
        self.method_cache.insert(
            key,
            Resolution {
                targets: res.targets.clone(),
                confidence: res.confidence,
            },
        );
        Ok(res)
    }

    /// Among the methods of the receiver's type: the same file, then the same
    /// directory, then the only place that type's methods are.
    fn pick_own(&self, r: &Ref, own: Vec<Rc<Symbol>>) -> Option<Resolution> {
        if own.is_empty() {
            return None;
        }
        let local: Vec<Rc<Symbol>> = own.iter().filter(|s| s.file_id == r.file_id).cloned().collect();
        if !local.is_empty() {
            return Some(Resolution::at(local, Confidence::Receiver));
        }
        let dir = dir_of(&r.path);
        let package: Vec<Rc<Symbol>> = own.iter().filter(|s| dir_of(&s.path) == dir).cloned().collect();
        if !package.is_empty() {
            return Some(Resolution::at(package, Confidence::Receiver));
        }
        Some(Resolution::at(own, Confidence::Receiver))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matches(importer: &str, lang: &str, module: &str, path: &str) -> bool {
        ModulePath::new(importer, lang, module).matches(path)
    }

    #[test]
    fn modules_match_their_files() {
        assert!(matches("app/main.py", "python", "app.models", "app/models.py"));
        assert!(matches("app/main.py", "python", ".models", "app/models.py"));
        assert!(matches("app/sub/x.py", "python", "..models", "app/models.py"));
        assert!(matches("app/main.py", "python", "pkg", "pkg/__init__.py"));
        assert!(!matches("app/main.py", "python", ".models", "other/models.py"));
        assert!(matches("web/app.ts", "typescript", "./api", "web/api.ts"));
        assert!(matches("web/app.ts", "typescript", "../lib/api.js", "lib/api.ts"));
        assert!(matches("web/app.ts", "typescript", "./store", "web/store/index.ts"));
        assert!(matches(
            "cmd/main.go",
            "go",
            "github.com/u/r/pkg/util",
            "pkg/util/util.go"
        ));
        assert!(!matches(
            "cmd/main.go",
            "go",
            "github.com/u/r/pkg/util",
            "pkg/other/util2.go"
        ));
        assert!(matches(
            "src/main.rs",
            "rust",
            "crate::store::disk",
            "src/store/disk.rs"
        ));
        assert!(matches("src/main.rs", "rust", "crate::store", "src/store/mod.rs"));
        assert!(matches("A.java", "java", "com.x.Foo", "src/main/java/com/x/Foo.java"));
        assert!(matches("a.c", "c", "util.h", "lib/util.c"));
        assert!(!matches("a.py", "python", "numpy", "app/models.py"));
    }
}
