//! Semantic and hybrid search with the real built-in model (fetched by
//! `ken model fetch`, as .ci/run does), on real folders.

mod common;

use std::path::Path;
use std::process::Command;

use common::*;
use ken::embed::projection::{bf16_supported, Precision};
use ken::embed::{cosine, Embedder, InputKind, LocalBert};
use serde_json::Value;

fn model_dir() -> std::path::PathBuf {
    ken::embed::model::fetch(&ken::embed::model::MINILM).expect("the built-in model (run `ken model fetch`)")
}

#[test]
fn the_built_in_model_embeds_like_the_reference() {
    let model = LocalBert::load(&ken::embed::model::MINILM, &model_dir(), 256).unwrap();
    assert_eq!(model.id(), "all-MiniLM-L6-v2/256/text3");
    let v = model
        .embed(
            &[
                "A man is eating food.",
                "A man is eating a piece of bread.",
                "A man is riding a horse.",
            ],
            InputKind::Document,
        )
        .unwrap();
    assert_eq!(v.len(), 3);
    assert_eq!(v[0].len(), 384);
    let norm: f32 = v[0].iter().map(|x| x * x).sum::<f32>().sqrt();
    assert!((norm - 1.0).abs() < 1e-4);
    // sentence-transformers gives 0.755 and 0.247 for these pairs.
    let (close, far) = (cosine(&v[0], &v[1]), cosine(&v[0], &v[2]));
    assert!((close - 0.755).abs() < 0.01, "{close}");
    assert!((far - 0.247).abs() < 0.01, "{far}");
    // Batching and padding do not change a vector.
    let alone = model.embed(&["A man is riding a horse."], InputKind::Document).unwrap();
    assert!(cosine(&alone[0], &v[2]) > 0.9999);
    // Long input is truncated to the token budget, not rejected.
    let long = "fn f() { let x = 1; }\n".repeat(500);
    assert_eq!(model.token_counts(&[long.as_str()]).unwrap()[0], 256);
    assert_eq!(
        model.embed(&[long.as_str()], InputKind::Document).unwrap()[0].len(),
        384
    );
}

#[test]
fn the_batch_pass_embeds_as_candles_bert_model() {
    let model = LocalBert::load(&ken::embed::model::MINILM, &model_dir(), 256)
        .unwrap()
        .with_precision(Precision::F32);
    let long = "fn f() { let x = 1; }\n".repeat(500);
    // Lengths that differ: the shorter texts are padded in the batch.
    let texts = [
        "fn parse_config(path: &Path) -> Result<Config> { toml::from_str(&read(path)?) }",
        "x",
        "def check_jwt_expiry(token):\n    return token.exp > time.time()",
        long.as_str(),
    ];
    let ours = model.embed_batch(&texts).unwrap();
    let candle = model.embed_batch_with_candle(&texts).unwrap();
    assert_eq!(ours.len(), texts.len());
    for ((text, a), b) in texts.iter().zip(&ours).zip(&candle) {
        // The GELU's erf differs from libm's by under 1e-6.
        let similarity = cosine(a, b);
        assert!(similarity > 0.999999, "{text}: {similarity}");
    }
    // bf16 products round each factor to 8 bits; the vectors stay within 1e-4.
    if bf16_supported() {
        let bf16 = model.with_precision(Precision::Bf16).embed_batch(&texts).unwrap();
        for ((text, a), b) in texts.iter().zip(&bf16).zip(&candle) {
            let similarity = cosine(a, b);
            assert!(similarity > 0.9999 && a != b, "{text}: {similarity}");
        }
    }
}

#[test]
fn a_query_embeds_as_it_would_in_a_batch() {
    let default = LocalBert::load(&ken::embed::model::MINILM, &model_dir(), 256).unwrap();
    let reference = LocalBert::load(&ken::embed::model::MINILM, &model_dir(), 256)
        .unwrap()
        .with_precision(Precision::F32);
    let queries = [
        "x",
        "where is the JWT expiry checked?",
        "parse_config — lit le fichier de configuration, Größe prüfen 設定",
        // Over 64 tokens: too many rows for the half-float product.
        &"retry the request with exponential backoff ".repeat(12),
    ];
    // f32 products take half-float weights for a few rows: equal to ~1e-6,
    // not bit for bit. bf16 products (the default where the CPU has them)
    // are the same alone or padded in a batch.
    for (model, least) in [(&reference, 0.99999), (&default, 0.99999)] {
        let batch = model.embed_batch(&queries).unwrap();
        for (query, in_batch) in queries.iter().zip(&batch) {
            let alone = model.embed(&[query], InputKind::Query).unwrap();
            let similarity = cosine(&alone[0], in_batch);
            assert!(similarity > least, "{query}: {similarity}");
            let norm: f32 = alone[0].iter().map(|x| x * x).sum::<f32>().sqrt();
            assert!((norm - 1.0).abs() < 1e-4, "{query}: norm {norm}");
        }
    }
    // The sentence-transformers reference holds for queries too.
    let a = default.embed(&["A man is eating food."], InputKind::Query).unwrap();
    let b = default
        .embed(&["A man is eating a piece of bread."], InputKind::Query)
        .unwrap();
    assert!((cosine(&a[0], &b[0]) - 0.755).abs() < 0.01);
}

/// all-mpnet-base-v2 through ken's MPNet passes, against an independent
/// float64 numpy MPNet (Hugging Face's MPNetModel operations, mean pooling):
/// the numbers below are that reference's.
#[test]
fn the_mpnet_model_embeds_like_the_reference() {
    let dir = ken::embed::model::fetch(&ken::embed::model::MPNET)
        .expect("all-mpnet-base-v2 (`ken model fetch --model all-mpnet-base-v2`)");
    let model = LocalBert::load(&ken::embed::model::MPNET, &dir, 256)
        .unwrap()
        .with_precision(Precision::F32);
    assert_eq!(model.id(), "all-mpnet-base-v2/256/text3");
    assert_eq!(model.dimensions(), 768);
    let texts = [
        "A man is eating food.",
        "A man is eating a piece of bread.",
        "A man is riding a horse.",
        "fn parse_config(path: &Path) -> Result<Config> { let text = std::fs::read_to_string(path)?; toml::from_str(&text) }",
        "where is the JWT expiry checked?",
    ];
    let reference_heads: [[f32; 4]; 5] = [
        [0.035501, -0.008432, 0.022024, 0.016263],
        [0.017861, -0.033348, -0.005989, 0.041599],
        [0.022165, -0.008833, -0.007411, -0.006795],
        [-0.034892, -0.02508, -0.051037, 0.037712],
        [0.03479, -0.021255, 0.039325, -0.008958],
    ];
    // Padded in one batch (lengths 8 to 59 tokens).
    let batch = model.embed(&texts, InputKind::Document).unwrap();
    for ((text, vector), head) in texts.iter().zip(&batch).zip(&reference_heads) {
        assert_eq!(vector.len(), 768);
        for (ours, theirs) in vector.iter().zip(head) {
            assert!((ours - theirs).abs() < 2e-5, "{text}: {:?} vs {head:?}", &vector[..4]);
        }
        // One at a time, unpadded: the same vector.
        let alone = model.embed(&[text], InputKind::Query).unwrap();
        let similarity = cosine(&alone[0], vector);
        assert!(similarity > 0.99999, "{text}: {similarity}");
    }
    let (close, far) = (cosine(&batch[0], &batch[1]), cosine(&batch[0], &batch[2]));
    assert!((close - 0.660113).abs() < 1e-4, "{close}");
    assert!((far - 0.24643).abs() < 1e-4, "{far}");
    // Over the half-float product's 64 rows, and past the 128 of MPNet's
    // relative-position distance: truncated to the budget, not rejected.
    let long = "fn f() { let x = 1; }\n".repeat(500);
    assert_eq!(model.token_counts(&[long.as_str()]).unwrap()[0], 256);
    let query = "retry the request with exponential backoff ".repeat(12);
    let in_batch = model.embed_batch(&[query.as_str(), long.as_str()]).unwrap();
    let alone = model.embed(&[query.as_str()], InputKind::Query).unwrap();
    assert!(cosine(&alone[0], &in_batch[0]) > 0.99999);
    // bf16 products: the same vectors to 1e-4.
    if bf16_supported() {
        let bf16 = model
            .with_precision(Precision::Bf16)
            .embed(&texts, InputKind::Document)
            .unwrap();
        for ((text, a), b) in texts.iter().zip(&bf16).zip(&batch) {
            let similarity = cosine(a, b);
            assert!(similarity > 0.9999, "{text}: {similarity}");
        }
    }
}

/// `KEN_MODEL` chooses the larger built-in model; the index remembers it,
/// so a search without `KEN_MODEL` embeds its query with the same model; a
/// `KEN_MODEL_DIR` holding another model is refused and left as it was.
#[test]
fn the_mpnet_model_is_chosen_by_name_and_kept_by_the_index() {
    let mpnet = ken::embed::model::fetch(&ken::embed::model::MPNET).expect("all-mpnet-base-v2");
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    sample_project(root);
    let chosen = [("KEN_MODEL", "all-mpnet-base-v2".to_string())];
    let out = ken_env(root, &["index", "--json"], &chosen);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["embedding"]["model"], "all-mpnet-base-v2/256/text3", "{report}");
    assert!(semantic_top(root, "reject credentials that are too old").contains(&"check_expiry".to_string()));
    // BM25 weighs 0.7 against its vectors (x1.4 for a query the adapter
    // leaves as typed; three terms, too few for the lean of long questions),
    // unless KEN_FUSION_WEIGHTS says otherwise.
    let lexical_weight = |env: &[(&str, String)]| {
        let out = ken_env(root, &["search", "--json", "--explain", "reject old credentials"], env);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let hits: Value = serde_json::from_slice(&out.stdout).unwrap();
        hits[0]["explain"]["weights"]["lexical"].as_f64().unwrap()
    };
    let model_weight = lexical_weight(&[]);
    assert!(
        [0.7, 0.98].iter().any(|w| (model_weight - w).abs() < 1e-9),
        "{model_weight}"
    );
    let configured = lexical_weight(&[("KEN_FUSION_WEIGHTS", "1,1,1".to_string())]);
    assert!((configured - model_weight / 0.7).abs() < 1e-9, "{configured}");

    let minilm = model_dir();
    let other = [
        ("KEN_MODEL", "all-mpnet-base-v2".to_string()),
        ("KEN_MODEL_DIR", minilm.display().to_string()),
    ];
    for args in [&["model", "path"][..], &["model", "fetch"][..]] {
        let out = ken_env(root, args, &other);
        assert!(!out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("holds another model than all-mpnet-base-v2"),
            "{stderr}"
        );
    }
    assert!(
        minilm.join("model.safetensors").is_file(),
        "the other model's files are kept"
    );
    let out = ken_env(root, &["model", "fetch"], &[("KEN_MODEL", "bge-huge".to_string())]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("no built-in model is called \"bge-huge\""));
    assert!(mpnet.join("model.safetensors").is_file());
}

/// A model of the user's own, by name and folder: embedded under its name,
/// and searched by it while the folder is set.
#[test]
fn a_model_of_ones_own_is_named_and_found_by_its_folder() {
    let folder = model_dir();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    sample_project(root);
    let own = [
        ("KEN_MODEL", "my-minilm".to_string()),
        ("KEN_MODEL_DIR", folder.display().to_string()),
    ];
    let out = ken_env(root, &["index", "--json"], &own);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["embedding"]["model"], "my-minilm/256/text3", "{report}");
    let hits = semantic_hits(root, "reject credentials that are too old", 3, &own[1..]);
    assert!(hits[0]["symbol"].as_str().unwrap().contains("check_expiry"), "{hits:?}");
    let out = ken_env(root, &["model", "list"], &own);
    let listed = String::from_utf8_lossy(&out.stdout);
    assert!(listed.contains("  all-mpnet-base-v2"), "{listed}");
    assert!(listed.contains("* my-minilm"), "{listed}");
}

/// A folder of a model of one's own: MiniLM's files, linked, and the
/// sentence-transformers files given as (path, text).
fn own_model_folder(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for name in ["config.json", "tokenizer.json", "model.safetensors"] {
        std::os::unix::fs::symlink(model_dir().join(name), dir.path().join(name)).unwrap();
    }
    for (path, text) in files {
        let path = dir.path().join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    dir
}

/// MiniLM's first-token (`[CLS]`) vector of `text`, unit length, by
/// candle's BertModel on the text alone (no padding): a reference apart
/// from ken's passes and pooling.
fn cls_reference(text: &str) -> Vec<f32> {
    use candle_core::{DType, Device, Tensor};
    let dir = model_dir();
    let config: candle_transformers::models::bert::Config =
        serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    let weights = unsafe {
        candle_nn::VarBuilder::from_mmaped_safetensors(&[dir.join("model.safetensors")], DType::F32, &Device::Cpu)
    }
    .unwrap();
    let model = candle_transformers::models::bert::BertModel::load(weights, &config).unwrap();
    let mut tokenizer = tokenizers::Tokenizer::from_file(dir.join("tokenizer.json")).unwrap();
    tokenizer
        .with_truncation(Some(tokenizers::TruncationParams {
            max_length: 256,
            ..Default::default()
        }))
        .unwrap();
    tokenizer.with_padding(None);
    let encoding = tokenizer.encode(text, true).unwrap();
    let ids = Tensor::new(encoding.get_ids(), &Device::Cpu)
        .unwrap()
        .unsqueeze(0)
        .unwrap();
    let types = ids.zeros_like().unwrap();
    let hidden = model.forward(&ids, &types, None).unwrap();
    let first: Vec<f32> = hidden.get(0).unwrap().get(0).unwrap().to_vec1().unwrap();
    let norm = first.iter().map(|v| v * v).sum::<f32>().sqrt();
    first.iter().map(|v| v / norm).collect()
}

const CLS_POOLING: &str = r#"{"word_embedding_dimension": 384, "pooling_mode_cls_token": true,
    "pooling_mode_mean_tokens": false, "pooling_mode_max_tokens": false, "pooling_mode_mean_sqrt_len_tokens": false}"#;
const E5_PROMPTS: &str = r#"{"prompts": {"query": "query: ", "passage": "passage: "}, "default_prompt_name": null}"#;
const MODULES: &str = r#"[{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
    {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}]"#;

#[test]
fn a_model_of_ones_own_pools_and_prompts_as_its_folder_says() {
    use ken::embed::model::{ModelSettings, Pooling};
    let folder = own_model_folder(&[
        ("modules.json", MODULES),
        ("1_Pooling/config.json", CLS_POOLING),
        ("config_sentence_transformers.json", E5_PROMPTS),
    ]);
    let settings = ModelSettings::read(folder.path(), |_| None).unwrap();
    assert_eq!(
        settings,
        ModelSettings {
            pooling: Pooling::Cls,
            query_prompt: "query: ".into(),
            document_prompt: "passage: ".into(),
        }
    );
    // f32 products, to compare with candle's BertModel to 1e-5.
    let model = LocalBert::load_with(&ken::embed::model::MINILM, folder.path(), 256, settings)
        .unwrap()
        .with_precision(Precision::F32);
    let id = model.id();
    assert!(
        id.starts_with("all-MiniLM-L6-v2+cls+q") && id.contains("+d") && id.ends_with("/256/text3"),
        "the settings are part of the vectors' id: {id}"
    );
    // Chunks: the batch pass, with padding and truncation.
    let long = "fn f() { let x = 1; }\n".repeat(300);
    let docs = [
        "fn parse_config(path: &Path) -> Result<Config> { toml::from_str(&read(path)?) }",
        "x",
        long.as_str(),
    ];
    let vectors = model.embed(&docs, InputKind::Document).unwrap();
    for (doc, v) in docs.iter().zip(&vectors) {
        let similarity = cosine(v, &cls_reference(&format!("passage: {doc}")));
        assert!(similarity > 0.99999, "{doc}: {similarity}");
    }
    // Queries: one unpadded input each, short and long.
    let mean = LocalBert::load(&ken::embed::model::MINILM, &model_dir(), 256).unwrap();
    let long_query = "retry the request with exponential backoff ".repeat(12);
    for query in ["where is the JWT expiry checked?", "x", long_query.as_str()] {
        let v = model.embed(&[query], InputKind::Query).unwrap();
        let similarity = cosine(&v[0], &cls_reference(&format!("query: {query}")));
        assert!(similarity > 0.99999, "{query}: {similarity}");
        let other = cosine(&v[0], &mean.embed(&[query], InputKind::Query).unwrap()[0]);
        assert!(other < 0.99, "{query}: CLS is not the mean ({other})");
    }

    // The environment overrides the folder; a blank variable is unset.
    let env = |name: &str| match name {
        "KEN_MODEL_POOLING" => Some("mean".to_string()),
        "KEN_MODEL_QUERY_PROMPT" => Some("search_query: ".to_string()),
        _ => None,
    };
    let overridden = ModelSettings::read(folder.path(), env).unwrap();
    assert_eq!(
        (
            overridden.pooling,
            overridden.query_prompt.as_str(),
            overridden.document_prompt.as_str()
        ),
        (Pooling::Mean, "search_query: ", "passage: ")
    );
    // No settings files: mean pooling, no prompts, and the id of the plain model.
    let plain = own_model_folder(&[]);
    assert_eq!(
        ModelSettings::read(plain.path(), |_| None).unwrap(),
        ModelSettings::default()
    );

    // What ken does not run is refused, by name.
    let refused = |files: &[(&str, &str)], env: Option<&str>| {
        let folder = own_model_folder(files);
        let env = env.map(str::to_string);
        format!(
            "{:#}",
            ModelSettings::read(folder.path(), |name| (name == "KEN_MODEL_POOLING")
                .then(|| env.clone())
                .flatten())
            .unwrap_err()
        )
    };
    let max = refused(
        &[("1_Pooling/config.json", r#"{"pooling_mode_max_tokens": true}"#)],
        None,
    );
    assert!(
        max.contains("max_tokens") && max.contains("mean_tokens or cls_token"),
        "{max}"
    );
    let dense = refused(
        &[(
            "modules.json",
            r#"[{"path": "", "type": "sentence_transformers.models.Transformer"}, {"path": "2_Dense", "type": "sentence_transformers.models.Dense"}]"#,
        )],
        None,
    );
    assert!(dense.contains("Dense module"), "{dense}");
    let bad = refused(&[], Some("max"));
    assert!(bad.contains("KEN_MODEL_POOLING must be `mean` or `cls`"), "{bad}");
    let without_prompt = refused(
        &[(
            "1_Pooling/config.json",
            r#"{"pooling_mode_mean_tokens": true, "include_prompt": false}"#,
        )],
        None,
    );
    assert!(without_prompt.contains("include_prompt false"), "{without_prompt}");
    let broken = refused(&[("1_Pooling/config.json", "{not json")], None);
    assert!(broken.contains("1_Pooling/config.json"), "{broken}");
}

#[test]
fn a_models_settings_are_kept_by_the_index_and_a_change_re_embeds() {
    model_dir();
    let folder = own_model_folder(&[("1_Pooling/config.json", CLS_POOLING)]);
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    sample_project(root);
    let own = vec![
        ("KEN_MODEL", "cls-minilm".to_string()),
        ("KEN_MODEL_DIR", folder.path().display().to_string()),
    ];
    let index = |env: &[(&str, String)]| -> Value {
        let out = ken_env(root, &["index", "--json"], env);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let first = index(&own);
    assert_eq!(first["embedding"]["model"], "cls-minilm+cls/256/text3", "{first}");
    let contents = first["embedding"]["contents"].as_u64().unwrap();
    assert_eq!(first["embedding"]["embedded"].as_u64(), Some(contents));
    assert!(!semantic_hits(root, "reject credentials that are too old", 3, &own).is_empty());

    // Mean pooling by the environment: other vectors, all embedded again.
    let mut mean = own.clone();
    mean.push(("KEN_MODEL_POOLING", "mean".to_string()));
    let second = index(&mean);
    assert_eq!(second["embedding"]["model"], "cls-minilm/256/text3", "{second}");
    assert_eq!(second["embedding"]["embedded"].as_u64(), Some(contents), "{second}");
    // A search embeds its query with the index's settings, or says why it cannot.
    let hits = semantic_hits(root, "reject credentials that are too old", 3, &mean);
    assert!(hits[0]["symbol"].as_str().unwrap().contains("check_expiry"), "{hits:?}");
    let out = ken_env(
        root,
        &[
            "search",
            "--json",
            "--mode",
            "semantic",
            "reject credentials that are too old",
        ],
        &own,
    );
    let said = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("cls-minilm/256/text3") && said.contains("ken index"),
        "{said}"
    );

    // The built-in models run as they were trained: the index stays lexical, and says why.
    let out = ken_env(root, &["index"], &[("KEN_MODEL_POOLING", "cls".to_string())]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && err.contains("KEN_MODEL_POOLING is for a model of one's own"),
        "{err}"
    );
}

/// The names in the best semantic-only result (several when tiny
/// definitions are packed into one chunk).
fn semantic_top(root: &Path, query: &str) -> Vec<String> {
    let hits = semantic_hits(root, query, 3, &[]);
    let label = hits[0]["symbol"].as_str().unwrap_or_default();
    label.split(", ").map(str::to_string).collect()
}

/// `ken search --mode semantic` results, with `env` set.
fn semantic_hits(root: &Path, query: &str, k: usize, env: &[(&str, String)]) -> Vec<Value> {
    let k = k.to_string();
    let out = ken_env(root, &["search", "--json", "--mode", "semantic", "-k", &k, query], env);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("a JSON list")
}

fn index_json(root: &Path) -> Value {
    ken_json(root, &["index", "--json"])
}

/// `ken index`, then waits for the query adapter's fit it started in the
/// background to end.
fn index_and_fit(root: &Path) {
    index_json(root);
    wait_for_adapter(root);
}

/// Waits (up to two minutes) until no query adapter fit is pending or running.
fn wait_for_adapter(root: &Path) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        let state = ken_json(root, &["status", "--json"])["query_adapter_state"].clone();
        if !matches!(state.as_str(), Some("fitting" | "pending")) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the adapter's fit did not end: {state}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

#[test]
fn semantic_search_finds_paraphrases_and_embeddings_are_reused() {
    model_dir();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    sample_project(root);
    // The same function in two files: one embedding.
    let dup = "def normalize_whitespace(text):\n    return \" \".join(text.split())\n";
    write(root, "a/util.py", dup);
    write(root, "b/util.py", dup);

    let first = index_json(root);
    let e = &first["embedding"];
    assert_eq!(e["model"], "all-MiniLM-L6-v2/256/text3", "{first}");
    let contents = e["contents"].as_u64().unwrap();
    assert!(
        contents < first["chunks"].as_u64().unwrap(),
        "duplicate chunks share content: {first}"
    );
    assert_eq!(e["embedded"].as_u64(), Some(contents));
    assert_eq!(e["vectors_in_index"].as_u64(), Some(contents));

    let again = index_json(root);
    assert_eq!(again["embedding"]["embedded"], 0, "{again}");
    assert_eq!(again["embedding"]["reused"].as_u64(), Some(contents));

    assert!(semantic_top(root, "reject credentials that are too old").contains(&"check_expiry".to_string()));
    let hits = semantic_hits(root, "collapse runs of spaces", 3, &[]);
    assert_eq!(hits[0]["symbol"], "normalize_whitespace", "{hits:?}");
    // Hybrid keeps exact identifiers first.
    let hits = search(root, "render_template", 3);
    assert_eq!(hits[0]["symbol"], "render_template");
    let hits = search(root, "look up a user by their name", 3);
    let names = hits[0]["symbol"].as_str().unwrap_or_default();
    assert!(names.split(", ").any(|n| n == "findByName"), "{hits:?}");

    // Editing one function embeds only that function's new content.
    write(
        root,
        "src/lib.rs",
        &std::fs::read_to_string(root.join("src/lib.rs"))
            .unwrap()
            .replace("hello", "howdy"),
    );
    let third = index_json(root);
    assert_eq!(third["embedding"]["embedded"], 1, "{third}");
}

#[test]
fn a_question_finds_code_that_says_its_words_otherwise() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    // The question says "delete"; the code that does it says `remove`
    // (hybrid: the synonyms are matched beside the vector side only).
    write(
        root,
        "cache/sweep.py",
        "def remove_expired(cache, now):\n    \"\"\"Drops what has outlived its time.\"\"\"\n    \
         for key in [k for k, e in cache.items() if e.expires < now]:\n        cache.pop(key)\n",
    );
    write(
        root,
        "cache/listing.py",
        "def list_expired(cache, now):\n    \"\"\"Lists the entries of the cache that have expired.\"\"\"\n    \
         return [e for e in cache.values() if e.expires < now and e in cache]\n",
    );
    for i in 0..20 {
        write(
            root,
            &format!("util/m{i}.py"),
            &format!("def helper_{i}(entries):\n    return entries + {i}\n"),
        );
    }
    index_and_fit(root);
    let question = "Where does the cache delete the entries that expired?";
    assert_eq!(
        paths(&search(root, question, 2)),
        ["cache/sweep.py", "cache/listing.py"]
    );
    // Alone, without the vector side to weigh them too, they are not matched.
    let lexical: Vec<String> = paths_and_scores(root, "lexical", 2, question)
        .into_iter()
        .map(|(path, _)| path)
        .collect();
    assert_eq!(lexical, ["cache/listing.py", "cache/sweep.py"]);
    // A doc comment or an issue's title names things as the code does: its
    // words are matched as they are.
    assert_eq!(
        paths(&search(root, "Delete the entries that expired from the cache", 2)),
        ["cache/listing.py", "cache/sweep.py"]
    );
}

#[test]
fn a_chunk_without_a_vector_yet_is_not_buried() {
    model_dir();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    sample_project(root);
    index_json(root);
    // Just written, indexed lexically, not embedded yet (as while the
    // background embedding catches up after an edit).
    write(
        root,
        "src/auth/keys.py",
        "def rotate_signing_keys(store):\n    \"\"\"Rotate the signing keys of the token store.\"\"\"\n    store.rotate()\n",
    );
    ken_ok(root, &["index", "--no-embed", "-q"]);
    let status = ken_json(root, &["status", "--json"]);
    assert!(status["embedding_coverage"].as_f64().unwrap() < 1.0, "{status}");
    // Its words match the query exactly; token chunks that do have vectors
    // match it in meaning. Scored as the least similar chunk it would lose.
    let hits = search(root, "rotate the signing keys of the token store", 3);
    assert_eq!(hits[0]["symbol"], "rotate_signing_keys", "{hits:?}");
}

#[test]
fn without_the_model_lexical_search_still_works() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    sample_project(root);
    let run = |args: &[&str]| {
        Command::new(ken_bin())
            .args(args)
            .current_dir(root)
            .env("KEN_MODEL_DIR", root.join("no-model-here"))
            .env("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
            .env("PIP_RETRIES", "0")
            .env("HF_ENDPOINT", "http://127.0.0.1:9")
            .output()
            .unwrap()
    };
    let out = run(&["index"]);
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("semantic search is unavailable"), "{stderr}");
    assert!(stderr.contains("KEN_MODEL_DIR"), "{stderr}");

    // An identifier needs no vectors: answered silently.
    let out = run(&["search", "--json", "render_template"]);
    assert!(out.status.success());
    let hits: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(hits[0]["symbol"], "render_template");
    assert!(out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
    // A question falls back to lexical results and says so.
    let out = run(&["search", "--json", "render a template"]);
    assert!(out.status.success());
    let hits: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(hits[0]["symbol"], "render_template");
    assert!(String::from_utf8_lossy(&out.stderr).contains("lexical results only"));

    let out = run(&["search", "--mode", "semantic", "render"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("semantic search is unavailable"));
}

#[test]
fn vectors_of_another_budget_or_chunk_text_are_never_mixed() {
    model_dir();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    sample_project(root);
    let out = Command::new(ken_bin())
        .args(["index", "--json"])
        .current_dir(root)
        .env("KEN_SHARED_CACHE", "0")
        .env("KEN_EMBED_MAX_TOKENS", "128")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let short: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(short["embedding"]["model"], "all-MiniLM-L6-v2/128/text3", "{short}");
    // Queries are embedded by the embedder the stored vectors came from.
    assert!(semantic_top(root, "reject credentials that are too old").contains(&"check_expiry".to_string()));

    let full = index_json(root);
    let e = &full["embedding"];
    assert_eq!(e["model"], "all-MiniLM-L6-v2/256/text3", "{full}");
    assert_eq!(
        e["embedded"], e["contents"],
        "a new budget embeds everything again: {full}"
    );
    // Then the other budget's vectors and vector file are dropped: nothing searches them.
    let conn = rusqlite::Connection::open(root.join(".ken/index.db")).unwrap();
    let models: Vec<String> = conn
        .prepare("SELECT DISTINCT model FROM embeddings ORDER BY model")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(models, ["all-MiniLM-L6-v2/256/sig4", "all-MiniLM-L6-v2/256/text3"]);
    let vector_files: Vec<String> = std::fs::read_dir(root.join(".ken"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".usearch"))
        .collect();
    assert_eq!(vector_files, ["vectors-all-MiniLM-L6-v2_256_text3.usearch"]);
    drop(conn);

    // An index whose vectors were made from an older chunk text (no recipe
    // version in the id) is not searched by vector, and is re-embedded.
    let conn = rusqlite::Connection::open(root.join(".ken/index.db")).unwrap();
    conn.execute_batch(
        "DELETE FROM embeddings WHERE model <> 'all-MiniLM-L6-v2/256/text3';
         UPDATE embeddings SET model = 'all-MiniLM-L6-v2/256';
         UPDATE meta SET value = 'all-MiniLM-L6-v2/256' WHERE key = 'embedding_model';
         DELETE FROM meta WHERE key = 'vectors_pruned_for';",
    )
    .unwrap();
    drop(conn);
    let out = ken(root, &["search", "--json", "render a template"]);
    assert!(out.status.success());
    let hits: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(hits[0]["symbol"], "render_template");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("lexical results only") && stderr.contains("run `ken index`"),
        "{stderr}"
    );
    let out = ken(root, &["index", "--json"]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("the embedding model changed"));
    let again: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(again["embedding"]["model"], "all-MiniLM-L6-v2/256/text3", "{again}");
    let conn = rusqlite::Connection::open(root.join(".ken/index.db")).unwrap();
    let stale: i64 = conn
        .query_row(
            "SELECT count(*) FROM embeddings WHERE model = 'all-MiniLM-L6-v2/256'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(
        stale, 0,
        "the old recipe's vectors are dropped once the new ones are complete"
    );
    assert_eq!(
        again["embedding"]["embedded"], again["embedding"]["contents"],
        "{again}"
    );
    assert!(semantic_top(root, "reject credentials that are too old").contains(&"check_expiry".to_string()));
}

#[test]
fn a_lost_vector_file_is_rebuilt_without_re_embedding() {
    model_dir();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    sample_project(root);
    let first = index_json(root);
    let vectors: Vec<_> = std::fs::read_dir(root.join(".ken"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "usearch"))
        .collect();
    assert_eq!(vectors.len(), 1);
    std::fs::write(&vectors[0], b"garbage").unwrap();
    let second = index_json(root);
    assert_eq!(second["embedding"]["embedded"], 0, "{second}");
    assert_eq!(
        second["embedding"]["vectors_in_index"],
        first["embedding"]["vectors_in_index"]
    );
    assert!(semantic_top(root, "reject credentials that are too old").contains(&"check_expiry".to_string()));
}

#[test]
fn an_edited_chunk_is_searched_by_its_new_vector() {
    model_dir();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    // Enough other chunks that the edit removes a vector from the graph
    // instead of rebuilding it, indexed first so the edited chunk's vectors
    // are the newest rows.
    let others: String = (0..8)
        .map(|i| format!("def helper_{i}(items):\n    return sorted(items)[{i}:]\n\n\n"))
        .collect();
    write(root, "helpers.py", &others);
    index_json(root);
    let file = "charts.py";
    write(
        root,
        file,
        "def load_settings(path):\n    with open(path) as f:\n        return json.load(f)\n",
    );
    index_json(root);
    // The edit deletes the chunk's vectors (the newest rows) and embeds the
    // new text. SQLite hands a deleted highest id out again; the vector file,
    // keyed by id, then kept the old vector under it.
    write(
        root,
        file,
        "def load_settings(sales):\n    svg = render_bar_chart(sales)\n    return svg.to_string()\n",
    );
    let edited = index_json(root);
    assert_eq!(edited["embedding"]["embedded"], 1, "{edited}");
    let query = "draw a bar chart of the sales as SVG";
    let cosine_of = |root: &Path| -> f64 {
        let hits = ken_json(
            root,
            &["search", "--json", "--explain", "--mode", "semantic", "-k", "1", query],
        );
        assert_eq!(hits[0]["symbol"], "load_settings", "{hits:?}");
        hits[0]["explain"]["cosine"].as_f64().expect("a chunk similarity")
    };
    // The same text indexed from scratch gives the similarity to compare with.
    let fresh = tempfile::tempdir().unwrap();
    for name in [file, "helpers.py"] {
        std::fs::copy(root.join(name), fresh.path().join(name)).unwrap();
    }
    index_json(fresh.path());
    let (incremental, from_scratch) = (cosine_of(root), cosine_of(fresh.path()));
    assert!(
        (incremental - from_scratch).abs() < 1e-4,
        "the edited chunk is searched by a stale vector: {incremental} against {from_scratch}"
    );
}

#[test]
fn the_model_is_fetched_from_a_hub_and_verified() {
    let source = model_dir();
    let tmp = tempfile::tempdir().unwrap();
    let spec = &ken::embed::model::MINILM;
    let served = tmp
        .path()
        .join("hub")
        .join(spec.hf_repo)
        .join("resolve")
        .join(spec.hf_revision);
    std::fs::create_dir_all(&served).unwrap();
    for (file, _) in spec.files {
        std::fs::copy(source.join(file), served.join(file)).unwrap();
    }
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let mut server = Command::new("python3")
        .args(["-m", "http.server", "--bind", "127.0.0.1", &port.to_string()])
        .current_dir(tmp.path().join("hub"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Python starts slowly on a loaded machine: wait until the server accepts.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(std::time::Instant::now() < deadline, "the test hub did not start");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let fetch = |cache: &Path| {
        Command::new(ken_bin())
            .args(["model", "fetch"])
            .env("KEN_CACHE_DIR", cache)
            .env_remove("KEN_MODEL_DIR")
            .env("HF_ENDPOINT", format!("http://127.0.0.1:{port}"))
            .env("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
            .env("PIP_RETRIES", "0")
            .output()
            .unwrap()
    };
    let cache = tmp.path().join("cache");
    let out = fetch(&cache);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("Hugging Face hub"));
    assert!(cache.join("models/all-MiniLM-L6-v2/model.safetensors").is_file());

    // A tampered download is refused and deleted.
    std::fs::write(served.join("config.json"), b"{\"tampered\": true}").unwrap();
    let cache2 = tmp.path().join("cache2");
    let out = fetch(&cache2);
    let _ = server.kill();
    let _ = server.wait();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("sha256"), "{stderr}");
    assert!(!cache2.join("models/all-MiniLM-L6-v2/config.json").exists());
}

#[test]
fn similar_finds_code_like_a_snippet_or_a_chunk() {
    model_dir();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    sample_project(root);
    write(
        root,
        "a/text.py",
        // The constant between them keeps the two tiny functions apart.
        "def normalize_whitespace(text):\n    return \" \".join(text.split())\n\n\nBANG = \"!\"\n\n\ndef shout(text):\n    return text.upper() + BANG\n",
    );
    write(
        root,
        "b/clean.py",
        "def squeeze_spaces(s):\n    return \" \".join(s.split())\n",
    );
    index_json(root);

    let hits = ken_json(root, &["similar", "--json", "-k", "3", "a/text.py:2"]);
    assert_eq!(hits[0]["symbol"], "squeeze_spaces", "{hits}");
    assert!(
        hits.as_array().unwrap().iter().all(|h| h["path"] != "a/text.py"),
        "source file left out: {hits}"
    );
    let hits = ken_json(
        root,
        &["similar", "--json", "-k", "5", "--include-source-file", "a/text.py:2"],
    );
    assert!(
        hits.as_array().unwrap().iter().any(|h| h["symbol"] == "shout"),
        "{hits}"
    );
    assert!(
        hits.as_array()
            .unwrap()
            .iter()
            .all(|h| h["symbol"] != "normalize_whitespace"),
        "not itself: {hits}"
    );

    let hits = ken_json(
        root,
        &[
            "similar",
            "--json",
            "-k",
            "2",
            "def tidy(x):\n    return ' '.join(x.split())",
        ],
    );
    let top: Vec<&str> = hits
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|h| h["symbol"].as_str())
        .collect();
    assert!(
        top.contains(&"squeeze_spaces") && top.contains(&"normalize_whitespace"),
        "{hits}"
    );

    // A path:line that names nothing indexed is an error naming it, never unrelated hits.
    for (target, needle) in [
        ("nosuchfile.py:10", "nosuchfile.py is not in the index"),
        ("a/text.py:400", "no indexed code at line 400"),
    ] {
        let out = ken(root, &["similar", "--json", target]);
        assert!(!out.status.success(), "{target}: {out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(needle), "{target}: {stderr}");
        assert!(out.stdout.is_empty(), "{target}: no results");
    }
}

#[test]
fn background_embedding_lets_lexical_search_start_at_once() {
    model_dir();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    sample_project(root);
    let report = ken_json(root, &["index", "--background", "--json"]);
    assert!(report["embedding"].is_null(), "{report}");
    // Searchable right away (lexically at least), and a lexical-only answer
    // says embedding is under way, not that it was never started.
    let out = ken(root, &["search", "--json", "-k", "1", "render_template"]);
    let hits: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(hits[0]["symbol"], "render_template", "{hits}");
    let notice = String::from_utf8_lossy(&out.stderr);
    assert!(!notice.contains("--no-embed"), "{notice}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        let status = ken_json(root, &["status", "--json"]);
        if status["embedding_coverage"] == 1.0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "embedding did not finish: {status}"
        );
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
    assert!(semantic_top(root, "reject credentials that are too old").contains(&"check_expiry".to_string()));
}

#[test]
fn a_second_clone_takes_its_vectors_from_the_shared_cache() {
    let model = model_dir();
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    sample_project(&a);
    sample_project(&b);
    let index = |root: &Path| -> Value {
        let out = Command::new(ken_bin())
            .args(["index", "--json"])
            .current_dir(root)
            .env("KEN_CACHE_DIR", tmp.path().join("cache"))
            .env("KEN_MODEL_DIR", &model)
            .env_remove("KEN_SHARED_CACHE")
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let first = index(&a);
    let n = first["embedding"]["embedded"].as_u64().unwrap();
    assert!(n > 10, "{first}");
    assert_eq!(first["embedding"]["from_shared_cache"], 0);
    let second = index(&b);
    assert_eq!(second["embedding"]["embedded"], 0, "{second}");
    assert_eq!(second["embedding"]["from_shared_cache"].as_u64(), Some(n), "{second}");
    assert!(semantic_top(&b, "reject credentials that are too old").contains(&"check_expiry".to_string()));
}

/// A module of byte helpers: the first has no doc comment; the others do, and
/// two of them share most words of the question asked about the first.
fn byte_helpers() -> String {
    let documented = [
        ("count_ascii", "data", "Reports how many bytes of the data are ASCII, so a caller knows what the byte string holds.", "n = 0\n    for c in data:\n        if c < 128:\n            n += 1\n    return n"),
        ("strip_nul", "data", "Removes trailing NUL bytes from a buffer.", "end = len(data)\n    while end and data[end - 1] == 0:\n        end -= 1\n    return data[:end]"),
        ("to_hex", "data", "Formats bytes as lowercase hexadecimal digits.", "out = []\n    for c in data:\n        out.append(\"%02x\" % c)\n    return \"\".join(out)"),
        ("join_lines", "lines", "Joins byte lines with newlines.", "out = b\"\"\n    for line in lines:\n        out += line + b\"\\n\"\n    return out"),
        ("is_printable", "data", "Reports whether every byte of the data is a printable ASCII character.", "for c in data:\n        if not 32 <= c < 127:\n            return False\n    return True"),
        ("checksum", "data", "Adds up the bytes modulo 256.", "total = 0\n    for c in data:\n        total = (total + c) % 256\n    return total"),
        ("swap_case", "data", "Holds the data with upper and lower case letters exchanged.", "out = bytearray()\n    for c in data:\n        out.append(c ^ 32 if 65 <= c <= 90 or 97 <= c <= 122 else c)\n    return bytes(out)"),
    ];
    let mut src = String::from(
        "def has_upper(b):\n    found = False\n    for c in b:\n        if 65 <= c <= 90:\n            found = True\n            break\n    return found\n",
    );
    for (name, arg, doc, body) in documented {
        src.push_str(&format!("\n\ndef {name}({arg}):\n    \"\"\"{doc}\"\"\"\n    {body}\n"));
    }
    src
}

#[test]
fn signature_vectors_find_the_undocumented_function_a_question_describes() {
    model_dir();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    write(root, "bytes.py", &byte_helpers());
    let first = index_json(root);
    let contents = first["embedding"]["contents"].as_u64().unwrap();
    // Every chunk here is a named definition: each has a signature vector,
    // stored beside its chunk vector under its own id, and never embedded twice.
    assert_eq!(
        first["embedding"]["signatures_embedded"].as_u64(),
        Some(contents),
        "{first}"
    );
    let db = rusqlite::Connection::open(root.join(".ken/index.db")).unwrap();
    let stored: i64 = db
        .query_row(
            "SELECT count(*) FROM embeddings WHERE model = 'all-MiniLM-L6-v2/256/sig4'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(stored as u64, contents);
    let again = index_json(root);
    assert_eq!(again["embedding"]["signatures_embedded"], 0, "{again}");
    let status = ken_json(root, &["status", "--json"]);
    assert_eq!(status["signature_vectors"].as_u64(), Some(contents), "{status}");

    // The documented neighbours say the question's words; `has_upper`'s name
    // and signature say what it asks.
    let question = "Reports whether b holds an ASCII uppercase byte.";
    let top3 = |weights: Option<&str>| -> Vec<String> {
        let env: Vec<(&str, String)> = weights
            .map(|w| ("KEN_FUSION_WEIGHTS", w.to_string()))
            .into_iter()
            .collect();
        let out = ken_env(root, &["search", "--json", "-k", "3", question], &env);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let hits: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
        hits.iter()
            .map(|h| h["symbol"].as_str().unwrap_or_default().to_string())
            .collect()
    };
    assert!(top3(None).contains(&"has_upper".to_string()), "{:?}", top3(None));
    // --explain gives the three sides; the default fusion is their weighted
    // mean, BM25 weighing the question's six terms / 3 (no adapter here).
    let explained = ken_json(root, &["search", "--json", "--explain", "-k", "3", question]);
    for hit in explained.as_array().unwrap() {
        let e = &hit["explain"];
        let side = |k: &str| e[k].as_f64().unwrap_or_else(|| panic!("{k} in {hit}"));
        assert!(e["cosine"].is_number() && e["signature_cosine"].is_number(), "{hit}");
        assert_eq!(e["weights"]["lexical"].as_f64(), Some(2.0), "{hit}");
        let mean = (2.0 * side("lexical") + side("semantic") + side("signature")) / 4.0;
        assert!((side("fused") - mean).abs() < 1e-9, "{hit}");
        assert_explained(hit);
    }
    let without_signatures = top3(Some("1,1,0"));
    assert!(
        !without_signatures.contains(&"has_upper".to_string()),
        "{without_signatures:?}"
    );
}

#[test]
fn a_chunk_packing_small_definitions_has_a_signature_vector_for_each() {
    model_dir();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let mut src = String::from(
        "pub struct Client {\n    name: String,\n    retries: u32,\n    deadline_ms: u64,\n}\n\n\
         impl Client {\n    pub fn name(&self) -> &str {\n        &self.name\n    }\n\n    \
         pub fn max_retries(&self) -> u32 {\n        self.retries\n    }\n\n    \
         pub fn deadline_ms(&self) -> u64 {\n        self.deadline_ms\n    }\n}\n",
    );
    for (name, doc) in [
        ("render_page", "Draws the page's widgets into the frame buffer."),
        (
            "parse_color",
            "Reads a CSS colour such as #ff0000 into its red, green and blue parts.",
        ),
        ("hash_password", "Derives a salted hash of a password for storage."),
    ] {
        src.push_str(&format!(
            "\n/// {doc}\npub fn {name}(input: &str) -> String {{\n    let mut out = String::new();\n    for c in input.chars() {{\n        out.push(c);\n    }}\n    out\n}}\n"
        ));
    }
    write(root, "client.rs", &src);
    index_json(root);
    let db = rusqlite::Connection::open(root.join(".ken/index.db")).unwrap();
    let (symbol, bytes): (String, i64) = db
        .query_row(
            "SELECT c.symbol, length(e.vector) FROM chunks c
             JOIN embeddings e ON e.content_hash = c.content_hash AND e.model = 'all-MiniLM-L6-v2/256/sig4'
             WHERE c.symbol LIKE '%, %'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    // The three getters share one chunk and one row: three vectors end to end.
    assert_eq!(symbol, "name, max_retries, deadline_ms");
    assert_eq!(bytes, 3 * 384 * 4);
    let question = "How many times does the client try a failed request again?";
    let hits = ken_json(root, &["search", "--json", "--mode", "semantic", "-k", "1", question]);
    assert_eq!(hits[0]["symbol"], "name, max_retries, deadline_ms", "{hits}");
}

#[test]
fn a_longer_hybrid_list_keeps_the_default_lists_scores() {
    model_dir();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    // More chunks than a longer list's pool: each side's scale is taken
    // over the candidates, and must be the default list's at any limit.
    let topics = [
        "cache", "retry", "token", "socket", "parser", "queue", "timer", "layout",
    ];
    let actions = ["opens", "closes", "checks", "resets", "splits", "merges"];
    for (n, (topic, action)) in topics
        .iter()
        .flat_map(|t| actions.iter().map(move |a| (t, a)))
        .cycle()
        .take(400)
        .enumerate()
    {
        write(
            root,
            &format!("m{}/f{n}.py", n % 20),
            &format!("def {action}_{topic}_{n}(value):\n    \"\"\"It {action} the {topic} when the value {n} is due.\"\"\"\n    return value\n"),
        );
    }
    index_json(root);
    let question = "where does the code reset the retry timer once a token is due?";
    let default = paths_and_scores(root, "hybrid", 10, question);
    assert_eq!(default.len(), 10);
    assert_eq!(
        paths_and_scores(root, "hybrid", 60, question)[..10],
        default[..],
        "the first ten of -k 60 against the default list"
    );
}

#[test]
fn a_chunk_only_the_vectors_found_is_scored_by_bm25_as_the_lexical_side_scores_it() {
    model_dir();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    // Seventy short chunks about drawing say "ledger" once; one long function
    // means the question and says "ledger" once too: the lexical side's fifty
    // best are the short ones, so only the vectors find the long one. Two
    // hundred chunks without the word keep its IDF above zero.
    for i in 0..70 {
        write(
            root,
            &format!("sprites/draw_{i}.py"),
            &format!("def draw_sprite_{i}(canvas):\n    canvas.blit(sprite_{i})  # ledger\n"),
        );
    }
    for i in 0..200 {
        write(
            root,
            &format!("fill/scale_{i}.py"),
            &format!("def scale_{i}(x):\n    return x * {i}\n"),
        );
    }
    let mut body = String::from(
        "def balance_the_accounts(records):\n    \"\"\"Each period, pair every transfer the financial institution \
         sent with the ledger line that booked it, and return the pairs that disagree.\"\"\"\n",
    );
    for n in 0..30 {
        body.push_str(&format!(
            "    sent_{n} = records.transfers[{n}]\n    booked_{n} = records.lines[{n}]\n"
        ));
    }
    body.push_str("    return [(s, b) for s, b in zip(records.transfers, records.lines) if s != b]\n");
    write(root, "accounts.py", &body);
    index_json(root);
    let question = "compare the bank's monthly payments with the ledger and report mismatches";
    // Fusion leaning on the meaning, so that the long one is among five results.
    let weights = [("KEN_FUSION_WEIGHTS", "0.1,1,0".to_string())];
    let long_one = |mode: &str, k: &str| -> Value {
        let out = ken_env(
            root,
            &["search", "--json", "--explain", "--mode", mode, "-k", k, question],
            &weights,
        );
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let hits: Value = serde_json::from_slice(&out.stdout).unwrap();
        hits.as_array()
            .unwrap()
            .iter()
            .find(|h| h["path"] == "accounts.py")
            .unwrap_or_else(|| panic!("accounts.py in {mode}: {hits}"))
            .clone()
    };
    // Lexical, deep enough to score every chunk: its BM25 for "ledger".
    let lexical = long_one("lexical", "100");
    let bm25 = lexical["explain"]["bm25"].as_f64().unwrap();
    assert!(bm25 > 0.0, "{lexical}");
    // Hybrid, five results: it is among them by its meaning, with the same
    // BM25 (kept by the lexical ranking, or taken again if it skipped the row).
    let hybrid = long_one("hybrid", "5");
    let scored = hybrid["explain"]["bm25"].as_f64().unwrap();
    assert!(
        (scored - bm25).abs() < 1e-6 * bm25,
        "hybrid {hybrid} against lexical {lexical}"
    );
    assert!(hybrid["explain"]["cosine"].is_number(), "{hybrid}");
}

#[test]
fn bench_query_times_every_mode_and_the_phases_of_a_hybrid_search() {
    model_dir();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    // One query is sampled per 97 chunks.
    write_unrelated(root, "lib", 300);
    index_json(root);
    // Questions as agents ask them, from a JSON-lines file as the eval sets are.
    let questions = tmp.path().join("questions.jsonl");
    std::fs::write(
        &questions,
        "{\"query\": \"where is the retry delay of a failed request computed\"}\n\n\
         {\"query\": \"which function parses the settings file\"}\n",
    )
    .unwrap();
    let report = ken_json(
        root,
        &[
            "bench",
            "query",
            "--json",
            "--iterations",
            "1",
            "--questions",
            questions.to_str().unwrap(),
        ],
    );
    assert_eq!(report["vectors"], report["chunks"], "{report}");
    let modes: Vec<&str> = report["modes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m[0].as_str().unwrap())
        .collect();
    for mode in [
        "lexical words",
        "semantic words",
        "hybrid words",
        "hybrid words (repeated)",
        "lexical questions",
        "hybrid questions",
    ] {
        assert!(modes.contains(&mode), "{mode} in {modes:?}");
    }
    assert_eq!(report["hybrid_phases"][1][0], "questions", "{report}");
    assert!(report["question_embedding_p50_ms"].as_f64().unwrap() > 0.0, "{report}");
    let phases = &report["hybrid_phases"][0];
    assert_eq!(phases[0], "words", "{report}");
    let phases = phases[1].as_array().unwrap();
    assert_eq!(phases.len(), 8, "{report}");
    // Every phase but the second connection's (it may have no share) takes time.
    for phase in phases
        .iter()
        .filter(|p| !p[0].as_str().unwrap().starts_with("the second connection"))
    {
        assert!(phase[1].as_f64().unwrap() > 0.0, "{phase}");
    }
}

#[test]
fn vectors_an_interrupted_switch_left_are_dropped_by_the_next_complete_pass() {
    model_dir();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    sample_project(root);
    index_json(root);
    let db = root.join(".ken/index.db");
    let count_of = |model: &str| -> i64 {
        rusqlite::Connection::open(&db)
            .unwrap()
            .query_row("SELECT count(*) FROM embeddings WHERE model = ?1", [model], |r| {
                r.get(0)
            })
            .unwrap()
    };
    // What a pass of another token budget leaves when it is interrupted: some of its vectors.
    rusqlite::Connection::open(&db)
        .unwrap()
        .execute_batch(
            "INSERT INTO embeddings (content_hash, model, vector)
             SELECT content_hash, 'all-MiniLM-L6-v2/128/text3', vector FROM embeddings
             WHERE model = 'all-MiniLM-L6-v2/256/text3' LIMIT 3",
        )
        .unwrap();
    // A pass of another model starts (and fails: nothing listens on the port).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let env = [
        ("KEN_EMBED_PROVIDER", "openai".to_string()),
        ("KEN_EMBED_URL", format!("http://127.0.0.1:{port}/v1")),
        ("KEN_EMBED_MODEL", "fake".to_string()),
        ("KEN_EMBED_RETRIES", "0".to_string()),
    ];
    let out = ken_env(root, &["index", "-q"], &env);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(count_of("all-MiniLM-L6-v2/128/text3"), 3);
    // The next complete pass of the built-in model drops what the others left.
    let again = index_json(root);
    assert_eq!(again["embedding"]["embedded"], 0, "{again}");
    assert_eq!(count_of("all-MiniLM-L6-v2/128/text3"), 0);
    assert!(count_of("all-MiniLM-L6-v2/256/text3") > 0);
    assert!(count_of("all-MiniLM-L6-v2/256/sig4") > 0);
}

/// `count` Rust functions documented in varied words, from `first` on.
fn documented_functions(count: usize, first: usize) -> String {
    const VERBS: [(&str, &str); 6] = [
        ("parse", "Parses"),
        ("render", "Renders"),
        ("check", "Checks"),
        ("merge", "Merges"),
        ("count", "Counts"),
        ("load", "Loads"),
    ];
    const NOUNS: [&str; 7] = ["header", "cookie", "config", "token", "route", "session", "payload"];
    (first..first + count)
        .map(|i| {
            let (verb, says) = VERBS[i % VERBS.len()];
            let noun = NOUNS[(i / VERBS.len()) % NOUNS.len()];
            format!(
                "/// {says} the {noun} of request number {i} before it is sent.\n\
                 pub fn {verb}_{noun}_{i}(input: &str) -> usize {{\n    let mut total = {i};\n    \
                 for (at, byte) in input.bytes().enumerate() {{\n        if byte == b'{verb_char}' {{\n            \
                 total += at;\n        }} else {{\n            total -= 1;\n        }}\n    }}\n    total\n}}\n\n",
                verb_char = &verb[..1]
            )
        })
        .collect()
}

#[test]
fn the_query_adapter_is_fitted_on_documented_code_and_carries_queries() {
    model_dir();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let status = |root: &Path| ken_json(root, &["status", "--json"]);

    // Issue 38: `ken index` returns with the vectors; the fit runs after it,
    // in a background process. `KEN_QUERY_ADAPTER=0` fits none.
    write(root, "src/few.rs", &documented_functions(5, 0));
    let off = [("KEN_QUERY_ADAPTER", "0".to_string())];
    let out = ken_env(root, &["index", "--json"], &off);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let indexed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(indexed["query_adapter"], Value::Null, "{indexed}");
    let out = ken_env(root, &["status", "--json"], &off);
    let said: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(said["query_adapter_state"], "off");
    assert_eq!(said["query_adapter_pairs"], Value::Null);

    // Too few documented definitions: no adapter, and status says so.
    index_and_fit(root);
    assert_eq!(status(root)["query_adapter_pairs"], 5);
    assert!(ken_ok(root, &["status"]).contains("query adapter: none (5 documented definitions, 100 needed)"));

    // A long-lived searcher (as `ken serve` pools them), opened before the fit.
    let semantic = |query: &str| {
        let mut req = ken::search::SearchRequest::new(query);
        req.mode = ken::search::SearchMode::Semantic;
        req.limit = 5;
        req
    };
    let scored = |hits: Vec<ken::search::SearchHit>| -> Vec<(Option<String>, f64)> {
        hits.into_iter().map(|h| (h.symbol, h.score)).collect()
    };
    let mut pooled = ken::search::Searcher::open(root, &root.join(".ken")).unwrap();
    pooled.search(&semantic("count the cookies")).unwrap();

    // Enough: fitted on each of them (the doc comments' first sentences).
    for part in 0..6 {
        write(
            root,
            &format!("src/part{part}.rs"),
            &documented_functions(20, 100 + 20 * part),
        );
    }
    let indexed = index_json(root);
    // `ken index` returned before the fit: a process of its own fits it.
    let said = indexed["query_adapter"].as_str().unwrap_or_default().to_string();
    assert!(
        said.contains("fitted in the background at low priority (pid "),
        "{indexed}"
    );
    wait_for_adapter(root);
    assert_eq!(status(root)["query_adapter_pairs"], 125);
    assert_eq!(status(root)["query_adapter_state"], "fitted");
    assert!(ken_ok(root, &["status"]).contains("query adapter: fitted on 125 documented definitions ("));
    // How it was chosen: the method, and held-out definitions ranked better than as typed.
    let how = status(root)["query_adapter_fit"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(how.contains(": held-out MRR "), "{how}");

    // Search carries its query vector by the adapter when a word that led
    // the fitted sentences ("Counts") leads it: the same hits score
    // otherwise without it.
    let scores = |query: &str, env: &[(&str, String)]| -> Vec<(String, f64)> {
        let hits = semantic_hits(root, query, 5, env);
        hits.iter()
            .map(|h| (h["symbol"].as_str().unwrap().to_string(), h["score"].as_f64().unwrap()))
            .collect()
    };
    let without = [("KEN_QUERY_ADAPTER", "0".to_string())];
    let adapted = scores("count the lengths of cookies", &[]);
    assert_eq!(adapted.len(), 5);
    assert_ne!(adapted, scores("count the lengths of cookies", &without));
    // Other questions (an issue title), a lone name or two keywords are searched as typed.
    for short in [
        "cookie lengths are wrong after a merge",
        "parse_cookie_12",
        "cookie lengths",
    ] {
        let as_typed = |env| semantic_hits(root, short, 5, env);
        assert_eq!(as_typed(&[]), as_typed(&[("KEN_QUERY_ADAPTER", "0".to_string())]));
    }
    // Hybrid weighs BM25 more for a question the adapter passes by (1.4)
    // and for a long one it does not carry (its terms / 3, from 1 to 3):
    // the fused score is w lexical + semantic + signature, over w + 2; for a
    // short carried question the three sides weigh the same.
    let lexical_weight = |query: &str, env: &[(&str, String)]| -> f64 {
        let out = ken_env(root, &["search", "--json", "--explain", "-k", "5", query], env);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let hits: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
        assert!(!hits.is_empty(), "{query}");
        // `--explain` says the weights it used, and the scores were made with them.
        let weight = hits[0]["explain"]["weights"]["lexical"].as_f64().unwrap();
        for h in &hits {
            let side = |name: &str| h["explain"][name].as_f64().unwrap();
            let sides = weight * side("lexical") + side("semantic") + side("signature");
            assert!((side("fused") - sides / (weight + 2.0)).abs() < 1e-9, "{query}: {h}");
            assert_eq!(h["explain"]["weights"]["lexical"].as_f64(), Some(weight), "{h}");
            assert_eq!(h["explain"]["weights"]["semantic"].as_f64(), Some(1.0), "{h}");
        }
        weight
    };
    let near = |a: f64, b: f64| (a - b).abs() < 1e-9;
    // Three terms: only the adapter's lean.
    let title = "cookie lengths wrong";
    assert!(near(lexical_weight(title, &[]), 1.4));
    assert!(near(lexical_weight(title, &without), 1.0));
    assert!(near(lexical_weight("count the lengths of cookies", &[]), 1.0));
    // Twelve terms: BM25 weighs 3 times more (the most), and 1.4 on top
    // when an adapter passes the question by.
    let long = "where are the lengths of cookies counted when the parser merges \
                header values from several responses into one jar";
    assert!(near(lexical_weight(long, &[]), 1.4 * 3.0));
    assert!(near(lexical_weight(long, &without), 3.0));
    // The pooled searcher takes the new fit up: it ranks as a new one does.
    assert!(pooled.refresh(root));
    let fresh = ken::search::Searcher::open(root, &root.join(".ken")).unwrap();
    let query = semantic("count the lengths of cookies");
    assert_eq!(
        scored(pooled.search(&query).unwrap()),
        scored(fresh.search(&query).unwrap())
    );

    // A small change keeps the fit; a branch grown by more than a quarter gets a new one.
    write(root, "src/one_more.rs", &documented_functions(1, 900));
    let indexed = index_json(root);
    assert_eq!(indexed["query_adapter"], Value::Null, "nothing to fit: {indexed}");
    assert_eq!(status(root)["query_adapter_state"], "fitted");
    assert_eq!(status(root)["query_adapter_pairs"], 125);
    write(root, "src/grown.rs", &documented_functions(60, 1000));
    index_and_fit(root);
    assert_eq!(status(root)["query_adapter_pairs"], 186);

    // The contrastive fit ranks each pair's code against every stored chunk
    // of the pair's file, then a spread sample; never against its own chunk.
    let conn = rusqlite::Connection::open(root.join(".ken/index.db")).unwrap();
    let one = |sql: &str| -> String { conn.query_row(sql, [], |r| r.get(0)).unwrap() };
    let fitted = one("SELECT value FROM meta WHERE key = 'query_adapter_v4'");
    // The words that led the fitted sentences, which decide what search carries.
    assert_eq!(
        one("SELECT value FROM meta WHERE key = 'query_adapter_leads'"),
        "check count load merge parse render"
    );
    let model = fitted.split(' ').next().unwrap();
    let branch = one("SELECT branch FROM catalog LIMIT 1");
    let stored = |path: &str| -> Vec<(i64, Vec<f32>)> {
        conn.prepare(
            "SELECT DISTINCT c.content_hash, e.vector FROM chunks c JOIN catalog k ON k.file_id = c.file_id
             JOIN embeddings e ON e.content_hash = c.content_hash AND e.model = ?2 WHERE k.path = ?1",
        )
        .unwrap()
        .query_map([path, model], |r| {
            Ok((r.get(0)?, ken::store::vectors::decode(&r.get::<_, Vec<u8>>(1)?)))
        })
        .unwrap()
        .map(Result::unwrap)
        .collect()
    };
    let few = stored("src/few.rs");
    assert!(few.len() >= 5, "{}", few.len());
    let mut pairs: Vec<i64> = few.iter().map(|(hash, _)| *hash).take(2).collect();
    pairs.push(-1); // not in the index
    let store = ken::store::Store::open_for_read(&root.join(".ken")).unwrap();
    let negatives = ken::embed::adapter::negatives(&store, &branch, model, &pairs, 7).unwrap();
    assert_eq!(negatives.vectors.len(), few.len() + 7);
    for (vector, own) in few.iter().take(2).map(|(_, v)| v).zip(&negatives.own) {
        assert_eq!(&negatives.vectors[own.unwrap()], vector);
    }
    assert_eq!(negatives.own[2], None);
    for (_, sibling) in &few {
        assert!(negatives.vectors.contains(sibling));
    }
}

#[test]
fn lexical_updates_never_wait_for_an_embedding_pass() {
    model_dir();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    for i in 0..1500 {
        write(
            root,
            &format!("pkg{}/handler_{i}.py", i % 50),
            &format!(
                "def handle_request_{i}(request, session):\n    \"\"\"Validate request {i} and store its payload.\"\"\"\n    \
                 payload = request.json()\n    session.add(payload)\n    return payload\n"
            ),
        );
    }
    ken_ok(root, &["index", "--no-embed", "-q"]);
    let mut embedding = Command::new(ken_bin())
        .args(["embed", "-q"])
        .current_dir(root)
        .env("KEN_SHARED_CACHE", "0")
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Wait until the pass has committed its first batch.
    let db = rusqlite::Connection::open(root.join(".ken/index.db")).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while db
        .query_row("SELECT count(*) FROM embeddings", [], |r| r.get::<_, i64>(0))
        .unwrap_or(0)
        == 0
    {
        assert!(std::time::Instant::now() < deadline, "the pass never committed a batch");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    drop(db);
    write(
        root,
        "pkg0/ledger.py",
        "def zanzibar_quokka_total(entries):\n    return sum(entries)\n",
    );
    let started = std::time::Instant::now();
    ken_ok(root, &["index", "--no-embed", "-q"]);
    let took = started.elapsed();
    let still_embedding = embedding.try_wait().unwrap().is_none();
    let hits = search(root, "zanzibar_quokka_total", 1);
    let _ = embedding.kill();
    let _ = embedding.wait();
    assert!(
        still_embedding,
        "the pass was still running while the index was updated"
    );
    assert!(
        took < std::time::Duration::from_secs(20),
        "a lexical update waited {took:?} for the embedding pass"
    );
    assert_eq!(hits[0]["symbol"], "zanzibar_quokka_total", "{hits:?}");
    // What the killed pass committed is kept.
    let db = rusqlite::Connection::open(root.join(".ken/index.db")).unwrap();
    let kept: i64 = db
        .query_row("SELECT count(*) FROM embeddings", [], |r| r.get(0))
        .unwrap();
    assert!(kept > 0);
}

/// Mean over `questions` of how far each one's own code is above the
/// nearest other code, by cosine.
fn margin_over_other_code(model: &LocalBert, questions: &[&str], codes: &[&str]) -> f32 {
    let q = model.embed(questions, InputKind::Query).unwrap();
    let c = model.embed(codes, InputKind::Document).unwrap();
    let margins = q.iter().enumerate().map(|(i, q)| {
        let other = (0..c.len())
            .filter(|&j| j != i)
            .map(|j| cosine(q, &c[j]))
            .fold(f32::MIN, f32::max);
        cosine(q, &c[i]) - other
    });
    margins.sum::<f32>() / questions.len() as f32
}

#[test]
fn the_code_model_is_made_from_the_verified_base_and_the_delta_ken_ships() {
    use ken::embed::model::{MINILM, MINILM_CODE};
    let base = model_dir();
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache");
    let base_copy = cache.join("models").join(MINILM.name);
    std::fs::create_dir_all(&base_copy).unwrap();
    for (file, _) in MINILM.files {
        std::fs::copy(base.join(file), base_copy.join(file)).unwrap();
    }
    // Nothing is downloaded: the base is in the cache, the delta in ken.
    let fetch = || {
        let out = Command::new(ken_bin())
            .args(["model", "fetch", "--model", MINILM_CODE.name])
            .env("KEN_CACHE_DIR", &cache)
            .env_remove("KEN_MODEL_DIR")
            .env("HF_ENDPOINT", "http://127.0.0.1:9")
            .env("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stderr).to_string()
    };
    let made = "made all-MiniLM-L6-v2-code from all-MiniLM-L6-v2";
    assert!(fetch().contains(made));
    let code = cache.join("models").join(MINILM_CODE.name);
    for file in ["config.json", "tokenizer.json"] {
        assert_eq!(
            std::fs::read(code.join(file)).unwrap(),
            std::fs::read(base.join(file)).unwrap()
        );
    }
    let weights = code.join("model.safetensors");
    let merged = std::fs::read(&weights).unwrap();
    assert_ne!(merged, std::fs::read(base.join("model.safetensors")).unwrap());
    // Fetched again it is kept; merged from another delta, it is made again, the same.
    assert!(!fetch().contains(made));
    std::fs::write(code.join(".ken-verified"), "merged delta 0000000000000000\n").unwrap();
    assert!(fetch().contains(made));
    assert_eq!(
        std::fs::read(&weights).unwrap(),
        merged,
        "a merge gives the same bytes every time"
    );

    let code_model = LocalBert::load(&MINILM_CODE, &code, 256).unwrap();
    let base_model = LocalBert::load(&MINILM, &base, 256).unwrap();
    assert!(
        code_model.id().starts_with("all-MiniLM-L6-v2-code/"),
        "{}",
        code_model.id()
    );
    // What the delta is for: a description nearer the code it describes,
    // against other code, than the base places it (code of no training repository).
    let questions = [
        "Parse the settings file at the given path.",
        "Retry the request, doubling the wait after each failure.",
        "Check whether the session token has expired.",
        "Escape the characters that are special in HTML.",
        "Count the words on each line of the input.",
    ];
    let codes = [
        "fn load(path: &Path) -> Result<Settings> {\n    let text = fs::read_to_string(path)?;\n    Ok(toml::from_str(&text)?)\n}",
        "func do(c *http.Client, req *http.Request) (*http.Response, error) {\n\tdelay := time.Second\n\tfor {\n\t\tresp, err := c.Do(req)\n\t\tif err == nil {\n\t\t\treturn resp, nil\n\t\t}\n\t\ttime.Sleep(delay)\n\t\tdelay *= 2\n\t}\n}",
        "def is_stale(tok):\n    return tok[\"exp\"] < time.time()",
        "function esc(s) {\n  return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/\"/g, '&quot;');\n}",
        "static void tally(FILE *in) {\n    char line[4096];\n    while (fgets(line, sizeof line, in)) {\n        int n = 0, inword = 0;\n        for (char *p = line; *p; p++) {\n            if (isspace(*p)) inword = 0;\n            else if (!inword) { inword = 1; n++; }\n        }\n        printf(\"%d\\n\", n);\n    }\n}",
    ];
    let (tuned, untuned) = (
        margin_over_other_code(&code_model, &questions, &codes),
        margin_over_other_code(&base_model, &questions, &codes),
    );
    assert!(tuned > untuned, "margin {tuned} with the delta, {untuned} without");
}

/// As above, in a long-lived searcher (a server's): its searches after the
/// first keep the rows' lengths, so the lexical ranking scores every row it
/// matches and fusion takes a vector-only chunk's BM25 from there. The
/// same results and scores as its first search, and lexical mode's BM25.
#[test]
fn a_long_lived_searcher_gives_a_vector_only_chunk_the_bm25_a_new_one_does() {
    model_dir();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    // `qzx` in 100 short chunks about something else, often: more than
    // the 80 lexical candidates of a top 10, and under a quarter of all
    // chunks (a term that is matched).
    for i in 0..100 {
        write(
            root,
            &format!("sprites/draw_{i}.py"),
            &format!("def draw_{i}(qzx):\n    qzx.blit({i})\n    qzx.flip()\n    qzx.clear()\n    return qzx\n"),
        );
    }
    write_unrelated(root, "util", 320);
    // The answer says `qzx` less often, in a longer chunk: last of the
    // lexical ranking, first in meaning.
    write(
        root,
        "shop/refunds.py",
        "def reimburse_purchase(order, qzx):\n    \"\"\"Reimburse a buyer in full when their purchase is cancelled.\"\"\"\n    qzx.append(order)\n    return qzx\n",
    );
    index_and_fit(root);
    // Its one word in common with the answer is `qzx`.
    let question = "give customers their money back in qzx";
    let request = |mode, limit| ken::search::SearchRequest {
        mode,
        limit,
        explain: true,
        ..ken::search::SearchRequest::new(question)
    };
    let ranked = |searcher: &ken::search::Searcher| -> Vec<(String, u32, f64, f64)> {
        let hits = searcher.search(&request(ken::search::SearchMode::Hybrid, 10)).unwrap();
        assert!(searcher.notice().is_none(), "{:?}", searcher.notice());
        hits.iter()
            .map(|h| (h.path.clone(), h.start_line, h.score, h.explain.as_ref().unwrap().bm25))
            .collect()
    };
    let searcher = ken::search::Searcher::open(root, &root.join(".ken")).unwrap();
    let once = ranked(&searcher);
    let kept = ranked(&searcher);
    assert_eq!(
        kept, once,
        "the ranking that kept every score ranks as the one that did not"
    );
    let answer = once
        .iter()
        .find(|(path, ..)| path == "shop/refunds.py")
        .unwrap_or_else(|| panic!("the answer is found: {once:?}"));
    let lexical = searcher
        .search(&request(ken::search::SearchMode::Lexical, 200))
        .unwrap();
    let lexical_rank = lexical
        .iter()
        .position(|h| h.path == "shop/refunds.py")
        .expect("a lexical match");
    assert!(
        lexical_rank >= 80,
        "not a lexical candidate of a top 10: {lexical_rank}"
    );
    let bm25 = lexical[lexical_rank].explain.as_ref().unwrap().bm25;
    assert!(bm25 > 0.0);
    assert_eq!(answer.3, bm25, "the BM25 fusion weighs is lexical mode's");
}
