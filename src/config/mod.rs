//! Every setting ken reads: the `KEN_*` environment variables, read once per
//! process and validated together ([`Settings`]), and the user's settings
//! file ([`file`]). No other module reads the environment for a setting: a
//! bad value is one clear error when ken starts, not a silent fallback deep
//! in a search.

pub mod file;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::OnceLock;

use anyhow::{bail, Context, Result};

pub use file::{expand_home, load, path};

/// How the vector index stores its numbers (`KEN_VECTOR_QUANTIZATION`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Quantization {
    #[default]
    F32,
    F16,
    I8,
}

/// How hybrid search combines its sides (`KEN_FUSION`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FusionKind {
    /// Weighted sum of the sides' scaled scores.
    #[default]
    Convex,
    /// Reciprocal rank fusion.
    Rrf,
}

/// RRF's rank offset when `KEN_RRF_K` does not set one (Cormack et al.).
pub const DEFAULT_RRF_K: f64 = 60.0;

/// How the query adapter is fitted (`KEN_QUERY_ADAPTER_FIT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AdapterFit {
    /// A contrastive fit, chosen on held-out pairs.
    #[default]
    Chosen,
    /// Ridge regression alone.
    Ridge,
}

/// Tokens of a chunk that reach the built-in model when
/// `KEN_EMBED_MAX_TOKENS` does not say: throughput halves when this doubles
/// (BENCHMARKS.md, "Built-in model").
pub const DEFAULT_MAX_TOKENS: usize = 256;

/// An HTTP embedding provider's settings as given (`KEN_EMBED_*`); the
/// provider applies its defaults.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProviderSettings {
    /// `openai` or `ollama`; `None` for the built-in model.
    pub kind: Option<String>,
    pub url: Option<String>,
    pub model: Option<String>,
    pub api_key_env: Option<String>,
    pub dimensions: Option<usize>,
    pub batch: Option<u64>,
    pub concurrency: Option<u64>,
    pub timeout_secs: Option<u64>,
    pub retries: Option<u64>,
    pub total_timeout_secs: Option<u64>,
    pub max_chars: Option<u64>,
    /// `KEN_QUERY_EMBED_TIMEOUT_MS`: how long a search waits for its query vector.
    pub query_timeout_ms: Option<u64>,
    /// `KEN_QUERY_EMBED_BACKOFF_SECS`: how long searches skip a failed provider.
    pub query_backoff_secs: Option<u64>,
}

/// A model of one's own and how to run it (`KEN_MODEL`, `KEN_MODEL_DIR`, ...).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ModelSettings {
    /// `KEN_MODEL`: a built-in model's name, or one's own in `dir`.
    pub name: Option<String>,
    /// `KEN_MODEL_DIR`: the folder holding the model.
    pub dir: Option<PathBuf>,
    /// `KEN_MODEL_POOLING`: `mean` or `cls`.
    pub pooling: Option<String>,
    pub query_prompt: Option<String>,
    pub document_prompt: Option<String>,
}

/// The `KEN_*` settings of this process.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Settings {
    /// `KEN_CONFIG`: the settings file, else the user's config folder's.
    pub config_file: Option<PathBuf>,
    /// `KEN_CACHE_DIR`: the per-user cache (models, shared vectors).
    pub cache_dir: Option<PathBuf>,
    /// `KEN_GRAMMARS_DIR`: query files that replace the built-in ones.
    pub grammars_dir: Option<PathBuf>,
    /// `KEN_LOG`: a tracing filter for stderr.
    pub log: Option<String>,
    /// `HF_ENDPOINT`: the Hugging Face hub models are fetched from (the
    /// hub's own variable, so a mirror set for other tools serves ken too).
    pub hub_endpoint: Option<String>,
    /// `KEN_INDEX_SECRETS=1`: files that look like secrets are indexed anyway.
    pub index_secrets: bool,
    /// `KEN_WATCH_POLL=1`: the watcher polls instead of OS notifications.
    pub watch_poll: bool,
    /// `KEN_SHARED_CACHE=0` turns the per-user vector cache off.
    pub shared_cache: bool,
    /// `KEN_QUERY_ADAPTER=0` leaves every query vector as the model made it.
    pub query_adapter: bool,
    pub query_adapter_fit: AdapterFit,
    pub vector_quantization: Quantization,
    pub fusion: FusionKind,
    /// `KEN_FUSION_WEIGHTS`: `lexical, semantic, signature`, when set.
    pub fusion_weights: Option<[f64; 3]>,
    pub rrf_k: f64,
    /// `KEN_EMBED_MAX_TOKENS`: tokens of a chunk the built-in model reads.
    pub embed_max_tokens: usize,
    pub provider: ProviderSettings,
    pub model: ModelSettings,
    /// The shared search engine (docs/scale.md), when one is configured.
    pub engine: EngineSettings,
    /// `KEN_SERVICE=0`: `ken serve` runs in its own process, sharing nothing.
    pub service: bool,
    /// `KEN_SERVICE_IDLE_SECS`: how long a shared service outlives its last session.
    pub service_idle_secs: u64,
}

/// The shared search engine: `KEN_ENGINE_URL` (a PostgreSQL URL) and
/// `KEN_ENGINE_PASSWORD` (kept out of the URL, of logs and of `Debug`).
#[derive(Clone, Default, PartialEq)]
pub struct EngineSettings {
    pub url: Option<String>,
    pub password: Option<String>,
    /// `KEN_ENGINE_REPO`: the name a push gives the repository (default:
    /// its folder's name).
    pub repo: Option<String>,
}

impl std::fmt::Debug for EngineSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineSettings")
            .field("url", &self.url.as_ref().map(|_| "<set>"))
            .field("password", &self.password.as_ref().map(|_| "<set>"))
            .field("repo", &self.repo)
            .finish()
    }
}

/// How long a shared service waits for a new session after its last one
/// closed when `KEN_SERVICE_IDLE_SECS` does not say: an agent restarted or a
/// second session opened within minutes finds its index loaded and watched.
pub const DEFAULT_SERVICE_IDLE_SECS: u64 = 300;

impl Settings {
    /// What, of these settings, changes what a server answers or writes: two
    /// `ken serve` share a service only when theirs are equal. The service's
    /// own lifetime settings are left out (they change nothing it says), and
    /// so is the settings file: what it sets (tools, allowed folders) is per session.
    pub fn behaviour_fingerprint(&self) -> String {
        let mut behaviour = self.clone();
        behaviour.config_file = None;
        behaviour.service = true;
        behaviour.service_idle_secs = 0;
        behaviour.log = None;
        format!("{behaviour:?}")
    }
}

/// Every setting ken knows; another `KEN_*` name is reported as a likely typo.
const KNOWN: &[&str] = &[
    "KEN_CACHE_DIR",
    "KEN_CONFIG",
    "KEN_EMBED_API_KEY_ENV",
    "KEN_EMBED_BATCH",
    "KEN_EMBED_CONCURRENCY",
    "KEN_EMBED_DIMENSIONS",
    "KEN_EMBED_MAX_CHARS",
    "KEN_EMBED_MAX_TOKENS",
    "KEN_EMBED_MODEL",
    "KEN_EMBED_PROVIDER",
    "KEN_EMBED_RETRIES",
    "KEN_EMBED_TIMEOUT",
    "KEN_EMBED_TOTAL_TIMEOUT",
    "KEN_EMBED_URL",
    "KEN_ENGINE_PASSWORD",
    "KEN_ENGINE_REPO",
    "KEN_ENGINE_URL",
    "KEN_FUSION",
    "KEN_FUSION_WEIGHTS",
    "KEN_GRAMMARS_DIR",
    "KEN_INDEX_DIR",
    "KEN_INDEX_SECRETS",
    "KEN_LOG",
    "KEN_MODEL",
    "KEN_MODEL_DIR",
    "KEN_MODEL_DOCUMENT_PROMPT",
    "KEN_MODEL_POOLING",
    "KEN_MODEL_QUERY_PROMPT",
    "KEN_QUERY_ADAPTER",
    "KEN_QUERY_ADAPTER_FIT",
    "KEN_QUERY_EMBED_BACKOFF_SECS",
    "KEN_QUERY_EMBED_TIMEOUT_MS",
    "KEN_RRF_K",
    "KEN_SERVICE",
    "KEN_SERVICE_IDLE_SECS",
    "KEN_SHARED_CACHE",
    "KEN_VECTOR_QUANTIZATION",
    "KEN_WATCH_POLL",
];

static SETTINGS: OnceLock<std::result::Result<Settings, String>> = OnceLock::new();

/// This process's settings, read from the environment on first use.
/// `ken` checks them with [`check`] before anything else, so a bad value
/// stops it at once; a library caller that skipped the check gets the same
/// error from the first setting it reads ([`try_settings`]) or a panic here.
pub fn settings() -> &'static Settings {
    match try_settings() {
        Ok(s) => s,
        Err(e) => panic!("{e:#}"),
    }
}

/// This process's settings, or why they are not valid.
pub fn try_settings() -> Result<&'static Settings> {
    SETTINGS
        .get_or_init(|| Settings::from_vars(environment()).map_err(|e| format!("{e:#}")))
        .as_ref()
        .map_err(|e| anyhow::anyhow!("{e}"))
}

/// Reads and validates the settings. Returns a warning for each `KEN_*`
/// variable that is not a setting but is spelled like one (a likely typo:
/// `KEN_FUSION_WEIGHT`), naming the setting meant.
pub fn check() -> Result<Vec<String>> {
    try_settings()?;
    Ok(likely_typos(environment().keys()))
}

fn likely_typos<'a>(names: impl Iterator<Item = &'a String>) -> Vec<String> {
    names
        .filter(|name| name.starts_with("KEN_") && !KNOWN.contains(&name.as_str()))
        .filter_map(|name| {
            let meant = KNOWN.iter().min_by_key(|known| strsim::levenshtein(name, known))?;
            (strsim::levenshtein(name, meant) <= 2).then(|| format!("{name} is not a setting; did you mean {meant}?"))
        })
        .collect()
}

/// The hub's variable for a mirror, read with the `KEN_*` settings.
const HUB_ENDPOINT: &str = "HF_ENDPOINT";

/// The `KEN_*` environment (and [`HUB_ENDPOINT`]); a blank value is unset (`KEN_X=` in a shell or a
/// client's config turns a setting off, not to "").
fn environment() -> BTreeMap<String, String> {
    std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .filter(|(k, v)| (k.starts_with("KEN_") || k == HUB_ENDPOINT) && !v.trim().is_empty())
        .collect()
}

impl Settings {
    /// The settings that `vars` (name → value, blank values left out) give.
    pub fn from_vars(vars: BTreeMap<String, String>) -> Result<Settings> {
        let var = |name: &str| vars.get(name).cloned();
        let flag = |name: &str, on: &str| var(name).is_some_and(|v| v.trim() == on);
        let path = |name: &str| var(name).map(PathBuf::from);
        let number = |name: &str| -> Result<Option<u64>> {
            var(name)
                .map(|v| {
                    v.trim()
                        .parse::<u64>()
                        .with_context(|| format!("{name}={v} is not a number"))
                })
                .transpose()
        };
        let choice = |name: &str, allowed: &[&str]| -> Result<Option<String>> {
            match var(name).map(|v| v.trim().to_string()) {
                Some(v) if !allowed.contains(&v.as_str()) => {
                    bail!("{name}={v}: expected {}", allowed.join(", "))
                }
                other => Ok(other),
            }
        };
        let embed_max_tokens = match number("KEN_EMBED_MAX_TOKENS")? {
            None => DEFAULT_MAX_TOKENS,
            Some(n) if (16..=512).contains(&n) => n as usize,
            Some(n) => bail!("KEN_EMBED_MAX_TOKENS={n}: expected 16 to 512 tokens"),
        };
        let provider_kind = choice("KEN_EMBED_PROVIDER", &["local", "builtin", "openai", "ollama"])?
            .filter(|kind| kind != "local" && kind != "builtin");
        Ok(Settings {
            config_file: path("KEN_CONFIG"),
            cache_dir: path("KEN_CACHE_DIR"),
            grammars_dir: path("KEN_GRAMMARS_DIR"),
            log: var("KEN_LOG"),
            hub_endpoint: var(HUB_ENDPOINT),
            index_secrets: flag("KEN_INDEX_SECRETS", "1"),
            watch_poll: flag("KEN_WATCH_POLL", "1"),
            shared_cache: !flag("KEN_SHARED_CACHE", "0"),
            query_adapter: !flag("KEN_QUERY_ADAPTER", "0"),
            query_adapter_fit: match choice("KEN_QUERY_ADAPTER_FIT", &["chosen", "ridge"])?.as_deref() {
                Some("ridge") => AdapterFit::Ridge,
                _ => AdapterFit::Chosen,
            },
            vector_quantization: match choice("KEN_VECTOR_QUANTIZATION", &["f32", "f16", "i8"])?.as_deref() {
                Some("f16") => Quantization::F16,
                Some("i8") => Quantization::I8,
                _ => Quantization::F32,
            },
            fusion: match choice("KEN_FUSION", &["convex", "rrf"])?.as_deref() {
                Some("rrf") => FusionKind::Rrf,
                _ => FusionKind::Convex,
            },
            fusion_weights: var("KEN_FUSION_WEIGHTS")
                .map(|v| {
                    parse_weights(&v).with_context(|| {
                        format!(
                            "KEN_FUSION_WEIGHTS must be two or three non-negative numbers \
                             `lexical,semantic[,signature]` (e.g. `1,1,1`), not `{v}`"
                        )
                    })
                })
                .transpose()?,
            rrf_k: match var("KEN_RRF_K") {
                None => DEFAULT_RRF_K,
                Some(v) => v
                    .trim()
                    .parse::<f64>()
                    .ok()
                    .filter(|k| *k >= 0.0)
                    .with_context(|| format!("KEN_RRF_K must be a non-negative number, not `{v}`"))?,
            },
            embed_max_tokens,
            provider: ProviderSettings {
                kind: provider_kind,
                url: var("KEN_EMBED_URL"),
                model: var("KEN_EMBED_MODEL"),
                api_key_env: var("KEN_EMBED_API_KEY_ENV"),
                dimensions: number("KEN_EMBED_DIMENSIONS")?.map(|n| n as usize),
                batch: number("KEN_EMBED_BATCH")?,
                concurrency: number("KEN_EMBED_CONCURRENCY")?,
                timeout_secs: number("KEN_EMBED_TIMEOUT")?,
                retries: number("KEN_EMBED_RETRIES")?,
                total_timeout_secs: number("KEN_EMBED_TOTAL_TIMEOUT")?,
                max_chars: number("KEN_EMBED_MAX_CHARS")?,
                query_timeout_ms: number("KEN_QUERY_EMBED_TIMEOUT_MS")?,
                query_backoff_secs: number("KEN_QUERY_EMBED_BACKOFF_SECS")?,
            },
            model: ModelSettings {
                name: var("KEN_MODEL").map(|v| v.trim().to_string()),
                dir: path("KEN_MODEL_DIR"),
                pooling: choice("KEN_MODEL_POOLING", &["mean", "cls"])?,
                query_prompt: var("KEN_MODEL_QUERY_PROMPT"),
                document_prompt: var("KEN_MODEL_DOCUMENT_PROMPT"),
            },
            engine: EngineSettings {
                url: var("KEN_ENGINE_URL"),
                password: var("KEN_ENGINE_PASSWORD"),
                repo: var("KEN_ENGINE_REPO").map(|v| v.trim().to_string()),
            },
            service: !flag("KEN_SERVICE", "0"),
            service_idle_secs: number("KEN_SERVICE_IDLE_SECS")?.unwrap_or(DEFAULT_SERVICE_IDLE_SECS),
        })
    }
}

/// `lexical,semantic[,signature]`: non-negative numbers, not all zero; the
/// signature weight defaults to 1.
fn parse_weights(text: &str) -> Option<[f64; 3]> {
    let numbers: Vec<f64> = text
        .split(',')
        .map(|n| n.trim().parse::<f64>().ok().filter(|w| *w >= 0.0 && w.is_finite()))
        .collect::<Option<_>>()?;
    let weights = match numbers[..] {
        [lexical, semantic] => [lexical, semantic, 1.0],
        [lexical, semantic, signature] => [lexical, semantic, signature],
        _ => return None,
    };
    (numbers.iter().sum::<f64>() > 0.0).then_some(weights)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(pairs: &[(&str, &str)]) -> Result<Settings> {
        Settings::from_vars(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect())
    }

    #[test]
    fn no_settings_are_the_defaults() {
        let s = of(&[]).unwrap();
        assert_eq!(s.embed_max_tokens, DEFAULT_MAX_TOKENS);
        assert_eq!(s.rrf_k, DEFAULT_RRF_K);
        assert!(s.shared_cache && s.query_adapter && !s.index_secrets && !s.watch_poll);
        assert_eq!((s.fusion, s.fusion_weights), (FusionKind::Convex, None));
        assert_eq!(s.provider.kind, None);
    }

    #[test]
    fn values_are_parsed_once_into_their_types() {
        let s = of(&[
            ("KEN_FUSION", " rrf "),
            ("KEN_FUSION_WEIGHTS", "1,0.5"),
            ("KEN_RRF_K", "10"),
            ("KEN_VECTOR_QUANTIZATION", "i8"),
            ("KEN_EMBED_PROVIDER", "openai"),
            ("KEN_EMBED_BATCH", "8"),
            ("KEN_SHARED_CACHE", "0"),
            ("KEN_EMBED_MAX_TOKENS", "128"),
        ])
        .unwrap();
        assert_eq!(s.fusion, FusionKind::Rrf);
        assert_eq!(s.fusion_weights, Some([1.0, 0.5, 1.0]));
        assert_eq!(s.rrf_k, 10.0);
        assert_eq!(s.vector_quantization, Quantization::I8);
        assert_eq!(s.provider.kind.as_deref(), Some("openai"));
        assert_eq!(s.provider.batch, Some(8));
        assert!(!s.shared_cache);
        assert_eq!(s.embed_max_tokens, 128);
        assert_eq!(of(&[("KEN_EMBED_PROVIDER", "local")]).unwrap().provider.kind, None);
    }

    #[test]
    fn services_are_shared_across_lifetimes_and_settings_files_but_not_behaviours() {
        let plain = of(&[]).unwrap().behaviour_fingerprint();
        let other_life = of(&[("KEN_SERVICE_IDLE_SECS", "5"), ("KEN_CONFIG", "/x.toml")]).unwrap();
        assert_eq!(other_life.behaviour_fingerprint(), plain);
        assert_ne!(of(&[("KEN_FUSION", "rrf")]).unwrap().behaviour_fingerprint(), plain);
        assert_ne!(of(&[("KEN_MODEL", "x")]).unwrap().behaviour_fingerprint(), plain);
    }

    #[test]
    fn a_misspelled_setting_is_named_with_the_one_meant() {
        let names = ["KEN_FUSION_WEIGHT", "KEN_MODEL", "KEN_EVAL_WORK"].map(String::from);
        assert_eq!(
            likely_typos(names.iter()),
            ["KEN_FUSION_WEIGHT is not a setting; did you mean KEN_FUSION_WEIGHTS?"]
        );
    }

    #[test]
    fn a_bad_value_is_an_error_that_names_the_setting() {
        for (name, value) in [
            ("KEN_FUSION", "sum"),
            ("KEN_FUSION_WEIGHTS", "1,-1"),
            ("KEN_FUSION_WEIGHTS", "0,0"),
            ("KEN_FUSION_WEIGHTS", "1"),
            ("KEN_RRF_K", "-1"),
            ("KEN_VECTOR_QUANTIZATION", "f8"),
            ("KEN_EMBED_PROVIDER", "cohere"),
            ("KEN_EMBED_BATCH", "many"),
            ("KEN_EMBED_MAX_TOKENS", "4096"),
            ("KEN_EMBED_MAX_TOKENS", "x"),
            ("KEN_MODEL_POOLING", "max"),
            ("KEN_QUERY_ADAPTER_FIT", "lasso"),
        ] {
            let e = of(&[(name, value)]).expect_err(name);
            assert!(format!("{e:#}").contains(name), "{name}={value}: {e:#}");
        }
    }
}
