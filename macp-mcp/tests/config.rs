//! Configuration resolution: flag beats file beats default, for the settings whose effect is not
//! visible at start (artifact limits).

use macp_mcp::config::{CommonArgs, Resolved, ServeArgs};

fn with_file(toml: &str) -> (tempfile::TempDir, CommonArgs) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("macp.toml");
    std::fs::write(&path, toml).unwrap();
    let common =
        CommonArgs { config: Some(path), data_dir: Some(dir.path().to_owned()), ..CommonArgs::default() };
    (dir, common)
}

#[test]
fn artifact_limits_come_from_flags_then_the_file_then_the_defaults() {
    let defaults = Resolved::new(&with_file("").1, &ServeArgs::default()).unwrap().artifacts;
    assert_eq!(defaults, macp_core::service::ArtifactConfig::default());

    let (_d, common) =
        with_file("artifact_max_bytes = 1048576\nartifact_types = [\"text/plain\", \"Image/PNG\"]\n");
    let from_file = Resolved::new(&common, &ServeArgs::default()).unwrap().artifacts;
    assert_eq!(from_file.max_bytes, 1_048_576);
    assert_eq!(from_file.allowed_content_types, ["image/png", "text/plain"]);

    let flags = ServeArgs {
        artifact_max_bytes: Some(4096),
        artifact_types: vec!["application/json".into()],
        ..ServeArgs::default()
    };
    let from_flags = Resolved::new(&common, &flags).unwrap().artifacts;
    assert_eq!(
        (from_flags.max_bytes, from_flags.allowed_content_types),
        (4096, vec!["application/json".to_owned()])
    );

    let bad = ServeArgs { artifact_types: vec!["png".into()], ..ServeArgs::default() };
    let e = Resolved::new(&common, &bad).unwrap_err();
    assert!(e.contains("`png`"), "{e}");
}

#[test]
fn context_caps_come_from_flags_then_the_file_then_the_defaults() {
    let defaults = Resolved::new(&with_file("").1, &ServeArgs::default()).unwrap().context_caps;
    assert_eq!(defaults, macp_core::ContextCaps::default());

    let (_d, common) = with_file("context_findings = 5\ncontext_budget_bytes = 65536\n");
    let from_file = Resolved::new(&common, &ServeArgs::default()).unwrap().context_caps;
    assert_eq!(
        (from_file.findings, from_file.budget_bytes, from_file.entities),
        (5, 65_536, defaults.entities)
    );

    let flags = ServeArgs { context_findings: Some(50), context_tags: Some(3), ..ServeArgs::default() };
    let from_flags = Resolved::new(&common, &flags).unwrap().context_caps;
    assert_eq!((from_flags.findings, from_flags.tags, from_flags.budget_bytes), (50, 3, 65_536));

    let zero = ServeArgs { context_entities: Some(0), ..ServeArgs::default() };
    let e = Resolved::new(&common, &zero).unwrap_err();
    assert!(e.contains("--context-entities"), "{e}");
}
