//! The built-in embedder matches what its recipe declares and what the reference
//! implementations produce: tokenizer ids (HF `tokenizers`), final vectors (the recipe's numpy
//! pipeline), and the vendored file's dimension, vocabulary size and checksum.
#![cfg(feature = "builtin-embedder")]

use macp_core::search::Embedder;
use macp_core::search::builtin::{BuiltinEmbedder, MODEL_BYTES, StaticModel, VOCAB_TXT};
use serde_json::Value;
use sha2::{Digest, Sha256};

fn fixture(name: &str) -> Value {
    let path = format!("{}/../tools/embedder/{name}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))).unwrap()
}

fn hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn vendored_model_matches_what_the_recipe_declares() {
    let declared = fixture("model/model.json");
    assert_eq!(hex(MODEL_BYTES), declared["sha256"], "model file checksum");
    assert_eq!(hex(VOCAB_TXT.as_bytes()), declared["vocab_sha256"], "vocabulary checksum");
    let e = BuiltinEmbedder::load().unwrap();
    assert_eq!(e.dimension() as u64, declared["dim"].as_u64().unwrap());
    assert_eq!(e.model().tokenizer().len() as u64, declared["vocab_size"].as_u64().unwrap());
    assert!(e.model_id().starts_with("macp-static-256-"), "{}", e.model_id());
}

#[test]
fn tokenizer_matches_the_reference_wordpiece() {
    let fx = fixture("tokenizer_fixture.json");
    let model = StaticModel::from_bytes(MODEL_BYTES, VOCAB_TXT).unwrap();
    let mut failures = Vec::new();
    let cases = fx["cases"].as_array().unwrap();
    for case in cases {
        let text = case["text"].as_str().unwrap();
        let want: Vec<u32> =
            case["ids"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
        let got = model.tokenizer().encode(text);
        if got != want {
            failures.push(format!("{text:?}: want {want:?} got {got:?}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases differ:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

#[tokio::test]
async fn embeddings_match_the_recipe_pipeline() {
    let fx = fixture("embedding_fixture.json");
    let e = BuiltinEmbedder::load().unwrap();
    let cases = fx["cases"].as_array().unwrap();
    let texts: Vec<String> = cases.iter().map(|c| c["text"].as_str().unwrap().to_owned()).collect();
    let got = e.embed(&texts).await.unwrap();
    for (case, v) in cases.iter().zip(&got) {
        let want: Vec<f32> =
            case["embedding"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect();
        assert_eq!(v.len(), e.dimension());
        for (j, w) in want.iter().enumerate() {
            assert!((v[j] - w).abs() < 1e-5, "{:?} component {j}: {} vs {w}", case["text"], v[j]);
        }
    }
    for pair in fx["cosine_pairs"].as_array().unwrap() {
        let (a, b) = (pair["a"].as_u64().unwrap() as usize, pair["b"].as_u64().unwrap() as usize);
        let cos = macp_core::search::dot(&got[a], &got[b]);
        assert!((cos as f64 - pair["cos"].as_f64().unwrap()).abs() < 1e-4, "pair {a},{b}: {cos}");
    }
}
