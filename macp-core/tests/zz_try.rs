//! Throwaway probe.
use macp_core::redact::{Redactions, Redactor};
#[test]
fn try_texts() {
    let r = Redactor::new();
    for line in std::fs::read_to_string("/tmp/try.jsonl").unwrap().lines() {
        let t: String = serde_json::from_str(line).unwrap();
        let out = r.text(&t, "content", &mut Redactions::default()).unwrap();
        let again = r.text(&out, "content", &mut Redactions::default()).unwrap();
        println!("IN : {}\nOUT: {}", t.replace('\n', "⏎"), out.replace('\n', "⏎"));
        if again != out {
            println!("!!UNSTABLE {}", again.replace('\n', "⏎"));
        }
    }
}
