//! The portable record: a room as a self-describing, versioned bundle that any backend can
//! restore with its ids, authorship, timestamps and order intact. It is how a room moves from
//! one backend to another (the embedded default to AWS and back), and the postmortem archive.
//!
//! Export and import are an operator's acts, like a backup: whoever runs them holds the storage
//! credentials already, so they read and write rooms whatever their membership. Neither is
//! offered to agents or the web view.
//!
//! What a bundle does not carry, on purpose: vectors and whether each finding was indexed (live
//! findings say `pending`: the importing server embeds them with its own model, as `reindex`
//! would), idempotency keys' records (retry protection lasts
//! minutes; a restored room accepts a retried key as new), released and lapsed claims (their
//! claims and releases are in the feed), and uploads never registered.

use std::collections::HashSet;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Serialize};

use super::*;
use crate::ids::{ArtifactId, FindingId};
use crate::model::{Finding, IndexStatus};
use crate::redact::{Redact, Redactions, Redactor};
use crate::store::{ArtifactQuery, FindingQuery, HeldIdentifier, ReadPosition, RelationshipKey, RoomRecord};

/// The `format` of every bundle.
pub const BUNDLE_FORMAT: &str = "macp-room-bundle";
/// The bundle version this build writes, and the newest it reads.
pub const BUNDLE_VERSION: u32 = 1;

/// How many times an export reads a room that keeps changing under it before giving up.
const EXPORT_ATTEMPTS: usize = 3;
/// Page size of the reads an export makes: a room with more of anything is read in pages
/// (the testkit's big-room case crosses it).
pub const EXPORT_PAGE: usize = 500;

/// A room, portable: the record, the artifacts' bytes, and what wrote it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RoomBundle {
    /// Always [`BUNDLE_FORMAT`]: what the file is.
    pub format: String,
    /// [`BUNDLE_VERSION`] when written by this build.
    pub version: u32,
    /// When it was exported.
    pub exported_at: Timestamp,
    /// The backend it came from (`sqlite`, `aws`, …).
    pub exported_from: String,
    /// What the export's scrub redacted, by kind; absent when the export did not scrub.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scrubbed: Option<Redactions>,
    /// Objects the scrub could not read as text (images, archives, …): carried as they are.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unscrubbed: Vec<String>,
    /// The room's record.
    pub record: RoomRecord,
    /// The bytes of every artifact the record lists and still holds (erased ones have none),
    /// by key.
    pub objects: Vec<StoredObject>,
}

/// An artifact's bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredObject {
    /// Its key (under the room's prefix).
    pub key: String,
    /// Its MIME type.
    pub content_type: String,
    /// The bytes, base64 (standard alphabet, padded).
    pub base64: String,
}

/// What [`Macp::import_room`] restored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ImportReport {
    /// The room.
    pub room_id: RoomId,
    /// Findings restored.
    pub findings: u64,
    /// Of those, indexed for search by this server's embedder.
    pub indexed: u64,
    /// Events restored.
    pub events: u64,
    /// Entities restored (merged ones included).
    pub entities: u64,
    /// Artifact objects written.
    pub objects: u64,
    /// Why some findings could not be indexed now (they stay pending for the reconciler).
    pub index_error: Option<String>,
    /// When the room will be purged (a closed room with a retention), as it now stands here;
    /// `None`: kept for good, or open.
    pub expires_at: Option<Timestamp>,
}

impl Macp {
    /// The room's whole record and its artifacts' bytes, as a bundle (see the module docs).
    /// With `scrub`, every text of the record (and every text artifact) passes this server's
    /// redactor on the way out, so that patterns added since the room was written apply too.
    ///
    /// The room should be quiet (closed, say): a room that keeps changing while it is read is
    /// refused with a retryable `conflict` rather than exported half-old, half-new. An artifact
    /// whose bytes are missing on every read is `not_found`, naming each such object.
    pub async fn export_room(&self, room_id: RoomId, scrub: bool) -> Result<RoomBundle> {
        let store = &self.inner.store;
        let mut changed = String::new();
        // The artifacts found without their bytes, on every read so far.
        let mut lost: Option<Vec<(ArtifactId, String)>> = None;
        for attempt in 0..EXPORT_ATTEMPTS {
            if attempt > 0 {
                // A change in flight settles, and an index read lagging its table catches up
                // (DynamoDB's secondary indexes are eventually consistent).
                tokio::time::sleep(std::time::Duration::from_millis(250 << attempt)).await;
            }
            let before = store.last_event_seq(room_id).await?;
            let record = self.read_record(room_id).await?;
            let objects = match self.read_objects(&record).await? {
                Ok(objects) => objects,
                Err(missing) => {
                    changed = missing
                        .iter()
                        .map(|(id, key)| {
                            format!("artifact {id} is registered but its object {key} is missing")
                        })
                        .collect::<Vec<_>>()
                        .join("; ");
                    lost = Some(match lost {
                        None => missing,
                        Some(before) => before.into_iter().filter(|m| missing.contains(m)).collect(),
                    });
                    continue;
                }
            };
            lost = Some(Vec::new());
            // Every change is an event, but not every store applies a change (or a purge) in
            // one step: the record must also agree with the room's own counters, and the room
            // must still be there.
            let (after, stats, graph, still) = tokio::try_join!(
                store.last_event_seq(room_id),
                store.finding_stats(room_id),
                store.entity_stats(room_id),
                store.get_room(room_id),
            )?;
            let whole = after == before
                && record.events.len() as u64 == after
                && record.findings.len() as u64 == stats.last_seq
                && record.relationships.len() as u64 == graph.relationships
                && still.is_some();
            if !whole {
                changed = format!(
                    "read {} events of {after}, {} findings of {}, {} relationships of {}",
                    record.events.len(),
                    record.findings.len(),
                    stats.last_seq,
                    record.relationships.len(),
                    graph.relationships
                );
                continue;
            }
            // What the store gave is not the caller's input: a record that does not hold
            // together is the backend's fault, said as such, after the reads a lagging index
            // may need (as for counts that disagree, above).
            if let Err(e) = check_record(&record) {
                if attempt + 1 < EXPORT_ATTEMPTS {
                    changed = format!("the record read does not hold together: {e}");
                    continue;
                }
                return Err(Error::backend(
                    store.name(),
                    false,
                    format!(
                        "the room as this backend gave it does not hold together, so it was not \
                         exported: {e}. Report it with the room id"
                    ),
                    None,
                ));
            }
            let mut bundle = RoomBundle {
                format: BUNDLE_FORMAT.into(),
                version: BUNDLE_VERSION,
                exported_at: self.now(),
                exported_from: store.name().into(),
                scrubbed: None,
                unscrubbed: Vec::new(),
                record,
                objects,
            };
            if scrub {
                let mut found = Redactions::default();
                // Not the writes' bound: a text artifact may be far longer than any text a
                // write carries, and the scrub must read all of it.
                let scrubber = self.inner.redactor.clone().max_input(usize::MAX);
                bundle.redact(&scrubber, &mut found)?;
                bundle.scrubbed = Some(found);
                // What the scrub wrote must be what an import takes (two identifiers made one
                // would be refused there, an archive that cannot be restored).
                check_bundle(&bundle).map_err(|e| {
                    Error::invalid(
                        "scrub",
                        format!(
                            "the scrubbed bundle would not import ({}); export without --scrub, and \
                             report it",
                            e
                        ),
                    )
                })?;
            }
            return Ok(bundle);
        }
        // Bytes missing on every read are not a write in flight: they are gone (deleted from the
        // bucket by hand, say), and reading again will not bring them back.
        let lost = lost.unwrap_or_default();
        if let Some((_, key)) = lost.first() {
            let ids: Vec<String> = lost.iter().map(|(id, _)| id.to_string()).collect();
            return Err(Error::not_found_hint(
                "artifact object",
                key,
                format!(
                    "{} artifact(s) of room {room_id} are registered but their bytes are gone from \
                     artifact storage ({}: {}); restore the objects from a backup, or erase the \
                     artifacts (erase, with their ids) and export again",
                    lost.len(),
                    ids.join(", "),
                    lost.iter().map(|(_, k)| k.as_str()).collect::<Vec<_>>().join(", ")
                ),
            ));
        }
        Err(Error::conflict(format!(
            "room {room_id} changed {EXPORT_ATTEMPTS} times while it was being exported ({changed}); \
             export it once it is quiet (closed, for example)"
        )))
    }

    async fn read_record(&self, room_id: RoomId) -> Result<RoomRecord> {
        let store = &self.inner.store;
        let room = store.get_room(room_id).await?.ok_or_else(|| Error::not_found("room", room_id))?;
        let mut agents = store.list_agents(room_id).await?;
        agents.sort_by(|a, b| a.agent_id.cmp(&b.agent_id));
        let mut read_positions = Vec::new();
        for a in &agents {
            let seq = store.read_position(room_id, &a.agent_id).await?;
            if seq > 0 {
                read_positions.push(ReadPosition { agent_id: a.agent_id.clone(), seq });
            }
        }
        let mut findings: Vec<Finding> = Vec::new();
        loop {
            let after = findings.last().map_or(0, |f| f.seq);
            let page = store.list_findings(room_id, &FindingQuery::after(after, EXPORT_PAGE)).await?;
            let done = page.len() < EXPORT_PAGE;
            findings.extend(page);
            if done {
                break;
            }
        }
        unindexed(&mut findings);
        let mut entities: Vec<crate::model::Entity> = Vec::new();
        loop {
            let after = entities.last().map(|e| e.entity_id);
            let page = store.list_entities(room_id, after, EXPORT_PAGE).await?;
            let done = page.len() < EXPORT_PAGE;
            entities.extend(page);
            if done {
                break;
            }
        }
        let mut wanted: Vec<_> = entities.iter().flat_map(|e| e.identifiers.iter().cloned()).collect();
        wanted.sort();
        wanted.dedup();
        let mut identifiers = Vec::with_capacity(wanted.len());
        for chunk in wanted.chunks(100) {
            for (identifier, entity_id) in store.find_identifiers(room_id, chunk).await? {
                identifiers.push(HeldIdentifier { identifier, entity_id });
            }
        }
        identifiers.sort_by(|a, b| a.identifier.cmp(&b.identifier));
        let mut relationships: Vec<crate::model::Relationship> = Vec::new();
        loop {
            let after = relationships.last().map(RelationshipKey::of);
            let page = store.list_relationships(room_id, after.as_ref(), EXPORT_PAGE).await?;
            let done = page.len() < EXPORT_PAGE;
            relationships.extend(page);
            if done {
                break;
            }
        }
        let mut artifacts: Vec<crate::model::Artifact> = Vec::new();
        loop {
            let q = ArtifactQuery {
                after: artifacts.last().map(|a| a.artifact_id),
                limit: EXPORT_PAGE,
                ..ArtifactQuery::default()
            };
            let page = store.list_artifacts(room_id, &q).await?;
            let done = page.len() < EXPORT_PAGE;
            artifacts.extend(page);
            if done {
                break;
            }
        }
        let claims = store.list_claims(room_id, self.now()).await?;
        let mut decisions = store.list_decisions(room_id, false).await?;
        decisions.sort_by_key(|d| d.decision_id);
        let mut events: Vec<crate::model::Event> = Vec::new();
        loop {
            let after = events.last().map_or(0, |e| e.seq);
            let page = store.list_events(room_id, after, &[], EXPORT_PAGE).await?;
            let done = page.len() < EXPORT_PAGE;
            events.extend(page);
            if done {
                break;
            }
        }
        // Positions acked before they were capped at the head could be past it.
        for p in &mut read_positions {
            p.seq = p.seq.min(events.len() as u64);
        }
        Ok(RoomRecord {
            room,
            agents,
            read_positions,
            findings,
            entities,
            identifiers,
            relationships,
            artifacts,
            claims,
            decisions,
            events,
        })
    }

    /// The bytes of the record's live artifacts; `Ok(Err(missing))` with each live artifact that
    /// has no object (erased or purged while the record was read, and the export reads again;
    /// or lost).
    async fn read_objects(
        &self,
        record: &RoomRecord,
    ) -> Result<std::result::Result<Vec<StoredObject>, Vec<(ArtifactId, String)>>> {
        let live: Vec<_> = record.artifacts.iter().filter(|a| a.erased.is_none()).collect();
        if live.is_empty() {
            return Ok(Ok(Vec::new()));
        }
        let blobs = self.inner.blobs.as_ref().ok_or_else(|| {
            Error::invalid("artifacts", "the room has artifacts but this server has no artifact storage")
        })?;
        let mut objects = Vec::with_capacity(live.len());
        let mut missing = Vec::new();
        for a in live {
            // Once one is missing the export reads again (or fails): the rest are only looked
            // for, not read, so that every missing one is named.
            if !missing.is_empty() {
                if blobs.head(&a.key).await?.is_none() {
                    missing.push((a.artifact_id, a.key.clone()));
                }
                continue;
            }
            match blobs.read_object(&a.key).await? {
                Some((meta, bytes)) => objects.push(StoredObject {
                    key: a.key.clone(),
                    content_type: meta.content_type,
                    base64: STANDARD.encode(bytes),
                }),
                None => missing.push((a.artifact_id, a.key.clone())),
            }
        }
        if !missing.is_empty() {
            return Ok(Err(missing));
        }
        objects.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(Ok(objects))
    }

    /// Restores a bundle into this server's backend: the artifacts' bytes, then the record
    /// (through [`RoomStore::restore_room`](crate::store::RoomStore::restore_room)), then the
    /// findings are embedded for search with this server's model. The room must not exist here
    /// (`already_exists`); a bundle of a newer version, or one that does not hold together
    /// (sequences with gaps, records of another room, artifacts outside the room), is refused
    /// before anything is written. An import cut short can be run again.
    ///
    /// `retention_days` replaces the room's own (0: keep it for good): a closed room keeps the
    /// retention it had, and one whose time ran out would be purged by this server's next purge,
    /// which an archive being restored should not be.
    pub async fn import_room(
        &self,
        mut bundle: RoomBundle,
        retention_days: Option<u32>,
    ) -> Result<ImportReport> {
        check_bundle(&bundle)?;
        let objects = decode_objects(&mut bundle)?;
        if let Some(days) = retention_days {
            bundle.record.room.retention_days = Some(super::rooms::retention(days)?);
        }
        let room_id = bundle.record.room.room_id;
        if self.inner.store.get_room(room_id).await?.is_some() {
            return Err(Error::AlreadyExists { what: "room", id: room_id.to_string() });
        }
        let mut report = ImportReport {
            room_id,
            findings: 0,
            indexed: 0,
            events: 0,
            entities: 0,
            objects: 0,
            index_error: None,
            expires_at: self.expires_at(&bundle.record.room),
        };
        let mut written = Vec::with_capacity(objects.len());
        if !objects.is_empty() {
            let blobs = self.inner.blobs.as_ref().ok_or_else(|| {
                Error::invalid("objects", "the bundle has artifacts but this server has no artifact storage")
            })?;
            // The room does not exist here, so nothing refers to what its prefix holds: an
            // earlier import cut short left it (maybe bytes since erased at the source). The
            // bundle's bytes replace all of it.
            blobs.delete_prefix(&super::artifacts::room_prefix(room_id)).await?;
            for (o, bytes) in objects {
                blobs.write_object(&o.key, &o.content_type, bytes).await?;
                written.push(o.key);
                report.objects += 1;
            }
        }
        // Whatever a (hand-made) bundle says: findings are embedded again here.
        unindexed(&mut bundle.record.findings);
        if let Err(e) = self.inner.store.restore_room(&bundle.record).await {
            // No room, so no object of it either; unless the room is there after all (its last
            // write committed but its answer was lost, or another import of it won): then the
            // bytes are its.
            let there = matches!(e, Error::AlreadyExists { .. })
                || self.inner.store.get_room(room_id).await.ok().flatten().is_some();
            if let (Some(blobs), false) = (&self.inner.blobs, there) {
                for key in &written {
                    let _ = blobs.delete(key).await;
                }
            }
            return Err(e);
        }
        let record = bundle.record;
        report.findings = record.findings.len() as u64;
        report.events = record.events.len() as u64;
        report.entities = record.entities.len() as u64;
        if self.search_parts().is_some() {
            let pending: Vec<Finding> = record.findings.into_iter().filter(|f| f.erased.is_none()).collect();
            for batch in pending.chunks(self.inner.search_config.reconcile_batch.max(1)) {
                // What fails here stays pending for the reconciler, as after a post.
                match self.index_findings(batch).await {
                    Ok(done) => report.indexed += done.len() as u64,
                    Err(e) => report.index_error = Some(e.to_string()),
                }
            }
        }
        self.changed(room_id);
        Ok(report)
    }
}

/// The bundle's objects with their bytes, each the size its artifact's record says: all decoded
/// before anything is written. Each object's base64 is dropped once decoded, so an import holds
/// the bytes once (and for a moment one object twice), not the base64 beside them.
fn decode_objects(b: &mut RoomBundle) -> Result<Vec<(StoredObject, Vec<u8>)>> {
    let mut out = Vec::with_capacity(b.objects.len());
    for mut o in std::mem::take(&mut b.objects) {
        let bytes = STANDARD
            .decode(&o.base64)
            .map_err(|e| Error::invalid("bundle", format!("the bytes of {} are not base64: {e}", o.key)))?;
        o.base64 = String::new();
        let artifact = b.record.artifacts.iter().find(|a| a.key == o.key);
        if let Some(a) = artifact.filter(|a| a.erased.is_some() || a.size != bytes.len() as u64) {
            return Err(Error::invalid(
                "bundle",
                format!(
                    "object {} does not match artifact {} ({} bytes where its record says {}{})",
                    o.key,
                    a.artifact_id,
                    bytes.len(),
                    a.size,
                    if a.erased.is_some() { ", and it was erased" } else { "" }
                ),
            ));
        }
        out.push((o, bytes));
    }
    Ok(out)
}

/// Marks live findings `pending`: whether a finding is in a server's vector index is that
/// server's state, not the room's record (the importing server embeds them with its own model),
/// so a bundle never claims it and two exports of one room agree whoever indexed what.
fn unindexed(findings: &mut [Finding]) {
    for f in findings.iter_mut().filter(|f| f.erased.is_none()) {
        f.index_status = IndexStatus::Pending;
    }
}

/// A bundle this build can restore, and a record that holds together: checked before anything
/// is written.
fn check_bundle(b: &RoomBundle) -> Result<()> {
    let bad = |m: String| Err(Error::invalid("bundle", m));
    if b.format != BUNDLE_FORMAT {
        return bad(format!("not a MACP room bundle (format `{}`, expected `{BUNDLE_FORMAT}`)", b.format));
    }
    if b.version > BUNDLE_VERSION || b.version == 0 {
        return bad(format!(
            "bundle version {} is not one this build reads (1 to {BUNDLE_VERSION}): import it with a newer macp",
            b.version
        ));
    }
    check_record(&b.record)?;
    let r = &b.record;
    let keys: HashSet<&str> = r.artifacts.iter().map(|a| a.key.as_str()).collect();
    if let Some(o) = b.objects.iter().find(|o| !keys.contains(o.key.as_str())) {
        return bad(format!("object {} belongs to no artifact of the record", o.key));
    }
    unique("object", b.objects.iter().map(|o| o.key.as_str()))?;
    let held: HashSet<&str> = b.objects.iter().map(|o| o.key.as_str()).collect();
    if let Some(a) = r.artifacts.iter().find(|a| a.erased.is_none() && !held.contains(a.key.as_str())) {
        return bad(format!("artifact {} has no bytes in the bundle ({})", a.artifact_id, a.key));
    }
    Ok(())
}

/// A record that holds together: one room, gap-free sequences, every id and key once, every
/// reference to something in the record. Checked on export (what a store gave) and on import
/// (what a file says).
fn check_record(r: &RoomRecord) -> Result<()> {
    let bad = |m: String| Err(Error::invalid("bundle", m));
    let room = r.room.room_id;
    let others = r
        .agents
        .iter()
        .map(|a| a.room_id)
        .chain(r.findings.iter().map(|f| f.room_id))
        .chain(r.entities.iter().map(|e| e.room_id))
        .chain(r.relationships.iter().map(|x| x.room_id))
        .chain(r.artifacts.iter().map(|a| a.room_id))
        .chain(r.claims.iter().map(|c| c.room_id))
        .chain(r.decisions.iter().map(|d| d.room_id));
    if let Some(other) = others.into_iter().find(|id| *id != room) {
        return bad(format!("the record of room {room} holds a record of room {other}"));
    }
    if let Some((i, f)) = r.findings.iter().enumerate().find(|(i, f)| f.seq != *i as u64 + 1) {
        return bad(format!(
            "finding {} has seq {} where {} was due: findings must be 1, 2, 3, …",
            f.finding_id,
            f.seq,
            i + 1
        ));
    }
    if let Some((i, e)) = r.events.iter().enumerate().find(|(i, e)| e.seq != *i as u64 + 1) {
        return bad(format!("event seq {} where {} was due: events must be 1, 2, 3, …", e.seq, i + 1));
    }
    unique("agent", r.agents.iter().map(|a| a.agent_id.as_str()))?;
    unique("finding", r.findings.iter().map(|f| f.finding_id))?;
    unique("entity", r.entities.iter().map(|e| e.entity_id))?;
    unique(
        "identifier",
        r.identifiers.iter().map(|h| format!("{}={}", h.identifier.id_type, h.identifier.value)),
    )?;
    unique("relationship", r.relationships.iter().map(|x| RelationshipKey::of(x).encode()))?;
    unique("artifact", r.artifacts.iter().map(|a| a.artifact_id))?;
    unique("artifact key", r.artifacts.iter().map(|a| a.key.as_str()))?;
    unique("claim", r.claims.iter().map(|c| c.key.as_str()))?;
    unique("decision", r.decisions.iter().map(|d| d.decision_id))?;
    unique("read position", r.read_positions.iter().map(|p| p.agent_id.as_str()))?;
    let last_event = r.events.len() as u64;
    if let Some(p) = r.read_positions.iter().find(|p| p.seq > last_event) {
        return bad(format!("agent {} has read to event {} of {last_event}", p.agent_id, p.seq));
    }
    if let Some(p) = r.read_positions.iter().find(|p| !r.agents.iter().any(|a| a.agent_id == p.agent_id)) {
        return bad(format!("agent {} has a read position but is not in the record", p.agent_id));
    }
    let entities: HashSet<EntityId> = r.entities.iter().map(|e| e.entity_id).collect();
    let unknown = r
        .entities
        .iter()
        .filter_map(|e| e.merged_into)
        .chain(r.identifiers.iter().map(|h| h.entity_id))
        .find(|id| !entities.contains(id));
    if let Some(id) = unknown {
        return bad(format!("entity {id} is named but not in the record"));
    }
    let prefix = super::artifacts::room_prefix(room);
    if let Some(a) = r.artifacts.iter().find(|a| !a.key.starts_with(&prefix)) {
        return bad(format!("artifact {} is stored outside the room ({})", a.artifact_id, a.key));
    }
    Ok(())
}

/// Refuses a second `what` with the same id or key.
fn unique<T: std::hash::Hash + Eq + std::fmt::Display>(
    what: &str,
    ids: impl IntoIterator<Item = T>,
) -> Result<()> {
    let mut seen = HashSet::new();
    for id in ids {
        if seen.contains(&id) {
            return Err(Error::invalid("bundle", format!("{what} {id} appears twice in the record")));
        }
        seen.insert(id);
    }
    Ok(())
}

/// Whether an artifact of this MIME type claims to be text: the scrub refuses one whose bytes
/// are not UTF-8 (it cannot read it, and must not pass it unread). Any other artifact is scrubbed
/// when its bytes are UTF-8 (a log uploaded as `application/octet-stream`), and otherwise travels
/// as it is, listed in [`RoomBundle::unscrubbed`].
fn is_text(content_type: &str) -> bool {
    let t = content_type.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    t.starts_with("text/")
        || ["/json", "+json", "/xml", "+xml", "/yaml", "+yaml", "/x-yaml", "/x-ndjson", "/javascript"]
            .iter()
            .any(|k| t.ends_with(k))
}

/// The scrub: every text the record carries, as [`crate::redact`] treats the write that
/// brought it, and every text artifact. Names matched as written (tags, agent ids, artifact
/// keys, relationship types), which take no placeholder on write, are refused instead: the
/// export fails naming the field, rather than carry a secret the scrub was asked to remove.
impl Redact for RoomBundle {
    fn redact(&mut self, r: &Redactor, found: &mut Redactions) -> Result<()> {
        let rec = &mut self.record;
        let fixed = |text: &str, field: &str| {
            r.refuse_secret(text, field).map_err(|e| {
                Error::invalid(
                    "scrub",
                    format!(
                        "{e}: the scrub cannot replace it (it is matched as written); erase what holds \
                         it, or export without --scrub"
                    ),
                )
            })
        };
        let names = rec
            .room
            .tags
            .iter()
            .map(|t| (t.as_str(), "room tag"))
            .chain(rec.findings.iter().flat_map(|f| f.tags.iter().map(|t| (t.as_str(), "finding tag"))))
            .chain(rec.agents.iter().map(|a| (a.agent_id.as_str(), "agent_id")))
            .chain(rec.agents.iter().filter_map(|a| Some((a.agent_type.as_deref()?, "agent_type"))))
            .chain(rec.artifacts.iter().map(|a| (a.key.as_str(), "artifact key")))
            .chain(rec.relationships.iter().map(|x| (x.relationship_type.as_str(), "relationship_type")))
            .chain(
                rec.findings
                    .iter()
                    .filter_map(|f| f.idempotency_key.as_deref())
                    .chain(rec.relationships.iter().filter_map(|x| x.idempotency_key.as_deref()))
                    .chain(rec.artifacts.iter().filter_map(|a| a.idempotency_key.as_deref()))
                    .map(|k| (k, "idempotency_key")),
            );
        for (text, field) in names {
            fixed(text, field)?;
        }
        let room = &mut rec.room;
        r.apply_opt(&mut room.name, "name", found)?;
        r.apply(&mut room.objective, "objective", found)?;
        for c in &mut room.objective_history {
            r.apply(&mut c.objective, "objective", found)?;
        }
        for res in room.resolution.iter_mut().chain(room.past_resolutions.iter_mut()) {
            r.apply(&mut res.summary, "resolution", found)?;
        }
        for m in &mut room.markers {
            r.apply(&mut m.label, "marker", found)?;
        }
        for a in &mut rec.agents {
            r.apply_opt(&mut a.status_reason, "status_reason", found)?;
        }
        for f in &mut rec.findings {
            r.apply(&mut f.content, "content", found)?;
            for e in &mut f.evidence {
                e.redact(r, found)?;
            }
            if let Some(x) = &mut f.erased {
                r.apply(&mut x.reason, "reason", found)?;
            }
        }
        for e in &mut rec.entities {
            r.apply(&mut e.name, "name", found)?;
            r.properties(&mut e.properties, found)?;
            let mut ids = std::mem::take(&mut e.identifiers);
            for id in &mut ids {
                r.identifier(&mut id.value, "identifiers", found)?;
            }
            e.add_identifiers(ids);
        }
        for h in &mut rec.identifiers {
            // Not counted again: the entity's own list counted it.
            r.identifier(&mut h.identifier.value, "identifiers", &mut Redactions::default())?;
        }
        rec.identifiers.sort_by(|a, b| a.identifier.cmp(&b.identifier));
        for x in &mut rec.relationships {
            r.apply_opt(&mut x.description, "description", found)?;
            for e in &mut x.evidence {
                e.redact(r, found)?;
            }
        }
        for a in &mut rec.artifacts {
            r.apply_opt(&mut a.description, "description", found)?;
            if let Some(x) = &mut a.erased {
                r.apply(&mut x.reason, "reason", found)?;
            }
        }
        for c in &mut rec.claims {
            // Fingerprinted as identifiers are, so that two subjects differing only in their
            // secrets stay two claims.
            r.identifier(&mut c.subject, "subject", found)?;
            c.key = crate::model::Claim::key_of(&c.subject);
        }
        for d in &mut rec.decisions {
            r.apply(&mut d.question, "question", found)?;
            for o in &mut d.options {
                r.apply(o, "options", found)?;
            }
            if let Some(a) = &mut d.answer {
                r.apply(&mut a.text, "answer", found)?;
            }
        }
        // A finding's post is summarised again from its scrubbed content, as the post's own
        // summary was made: scrubbing the summary, already cut at its length, could miss a
        // secret the cut split and leave its first part.
        let posts: HashMap<FindingId, &Finding> = rec.findings.iter().map(|f| (f.finding_id, f)).collect();
        for e in &mut rec.events {
            match e.finding_id.and_then(|id| posts.get(&id)) {
                // An erased finding's events already carry its notice, as the erasure left them.
                Some(f) if e.kind == crate::model::EventKind::FindingPosted && f.erased.is_none() => {
                    e.summary = crate::model::Event::summary_of(&f.post_summary());
                }
                _ => {
                    r.apply(&mut e.summary, "summary", found)?;
                    // A placeholder can be longer than what it replaced.
                    e.summary = crate::model::Event::summary_of(&e.summary);
                }
            }
        }
        for o in &mut self.objects {
            let unreadable = |why: String| {
                Error::invalid(
                    "scrub",
                    format!(
                        "cannot scrub artifact {} ({}): {why}; erase it, or export without --scrub",
                        o.key, o.content_type
                    ),
                )
            };
            let bytes = STANDARD.decode(&o.base64).map_err(|e| unreadable(e.to_string()))?;
            let text = match String::from_utf8(bytes) {
                Ok(text) => text,
                Err(_) if is_text(&o.content_type) => {
                    return Err(unreadable("its bytes are not UTF-8 text".into()));
                }
                Err(_) => {
                    self.unscrubbed.push(o.key.clone());
                    continue;
                }
            };
            let clean = r.text(&text, "artifact", found).map_err(|e| unreadable(e.to_string()))?;
            if clean != text {
                o.base64 = STANDARD.encode(clean.as_bytes());
                if let Some(a) = rec.artifacts.iter_mut().find(|a| a.key == o.key) {
                    a.size = clean.len() as u64;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::is_text;

    #[test]
    fn text_is_told_by_the_content_types_suffix_not_by_a_substring() {
        for t in [
            "text/plain",
            "text/csv; charset=utf-8",
            "application/json",
            "application/vnd.api+json",
            "application/xml",
            "image/svg+xml",
            "application/x-ndjson",
        ] {
            assert!(is_text(t), "{t}");
        }
        for t in [
            "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
            "application/octet-stream",
            "image/png",
            "application/zip",
        ] {
            assert!(!is_text(t), "{t}");
        }
    }
}
