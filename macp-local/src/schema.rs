//! The SQLite schema, created and migrated by version (`PRAGMA user_version`).
//!
//! Each entry of [`MIGRATIONS`] moves the schema from version `i` to `i + 1` and runs in one
//! transaction together with the version bump, so a crash mid-migration leaves the previous
//! version intact. Entries are append-only: never edit a released migration, add a new one.

use rusqlite::Connection;

/// Migration `i` upgrades a database at `user_version = i`.
pub(crate) const MIGRATIONS: &[&str] = &[
    // 1: the tables of the design, plus the commit sequence, tag index, FTS and idempotency.
    r#"
    CREATE TABLE rooms (
        room_id         TEXT PRIMARY KEY,
        name            TEXT,
        objective       TEXT NOT NULL,
        visibility_mode TEXT NOT NULL,
        created_at      INTEGER NOT NULL,
        created_by      TEXT NOT NULL,
        tags            TEXT NOT NULL,
        status          TEXT NOT NULL,
        closed_at       INTEGER,
        closed_by       TEXT,
        -- highest finding seq committed in the room; bumped inside each append transaction
        last_seq        INTEGER NOT NULL DEFAULT 0
    ) STRICT;
    CREATE INDEX rooms_by_created ON rooms (created_at DESC, room_id DESC);

    CREATE TABLE agent_sessions (
        room_id           TEXT NOT NULL,
        agent_id          TEXT NOT NULL,
        user_id           TEXT NOT NULL,
        joined_at         INTEGER NOT NULL,
        last_active       INTEGER NOT NULL,
        agent_type        TEXT,
        agent_status      TEXT NOT NULL,
        status_reason     TEXT,
        status_updated_at INTEGER NOT NULL,
        PRIMARY KEY (room_id, agent_id)
    ) STRICT, WITHOUT ROWID;

    CREATE TABLE findings (
        id              INTEGER PRIMARY KEY,
        room_id         TEXT NOT NULL,
        seq             INTEGER NOT NULL,
        finding_id      TEXT NOT NULL UNIQUE,
        content         TEXT NOT NULL,
        agent_id        TEXT NOT NULL,
        user_id         TEXT NOT NULL,
        tags            TEXT NOT NULL,
        entity_refs     TEXT NOT NULL,
        evidence        TEXT NOT NULL,
        index_status    TEXT NOT NULL,
        idempotency_key TEXT,
        created_at      INTEGER NOT NULL,
        UNIQUE (room_id, seq)
    ) STRICT;
    CREATE INDEX findings_by_agent ON findings (room_id, agent_id, seq);
    CREATE INDEX findings_pending ON findings (index_status, created_at) WHERE index_status = 'pending';

    CREATE TABLE finding_tags (
        room_id TEXT NOT NULL,
        tag     TEXT NOT NULL,
        seq     INTEGER NOT NULL,
        PRIMARY KEY (room_id, tag, seq)
    ) STRICT, WITHOUT ROWID;

    -- Full-text index over findings' content, rowid = findings.id, written in the same
    -- transaction as the finding. Contentless: the findings table stays the single source of
    -- truth. Search ranks with an in-memory BM25 index per room (same formula, kept equal to
    -- FTS5's bm25() by tests/search_fixture.rs); this table serves ad-hoc SQL over the record,
    -- e.g. `... FROM findings_fts JOIN findings f ON f.id = findings_fts.rowid WHERE
    -- findings_fts MATCH 'timeout' AND f.room_id = ?`.
    CREATE VIRTUAL TABLE findings_fts USING fts5 (content, content = '');

    -- Finding vectors (f32 little-endian), the durable half of the vector index.
    CREATE TABLE finding_vectors (
        room_id    TEXT NOT NULL,
        finding_id TEXT NOT NULL,
        agent_id   TEXT NOT NULL,
        tags       TEXT NOT NULL,
        vector     BLOB NOT NULL,
        PRIMARY KEY (room_id, finding_id)
    ) STRICT, WITHOUT ROWID;

    CREATE TABLE entities (
        room_id     TEXT NOT NULL,
        entity_id   TEXT NOT NULL,
        name        TEXT NOT NULL,
        entity_type TEXT NOT NULL,
        identifiers TEXT NOT NULL,
        properties  TEXT NOT NULL,
        created_by  TEXT NOT NULL,
        agent_id    TEXT NOT NULL,
        created_at  INTEGER NOT NULL,
        merged_into TEXT,
        PRIMARY KEY (room_id, entity_id)
    ) STRICT, WITHOUT ROWID;
    CREATE INDEX entities_merged ON entities (room_id, merged_into) WHERE merged_into IS NOT NULL;

    CREATE TABLE identifier_claims (
        room_id   TEXT NOT NULL,
        id_type   TEXT NOT NULL,
        id_value  TEXT NOT NULL,
        entity_id TEXT NOT NULL,
        PRIMARY KEY (room_id, id_type, id_value)
    ) STRICT, WITHOUT ROWID;

    CREATE TABLE relationships (
        room_id           TEXT NOT NULL,
        source_entity_id  TEXT NOT NULL,
        relationship_type TEXT NOT NULL,
        target_entity_id  TEXT NOT NULL,
        description       TEXT,
        evidence          TEXT NOT NULL,
        created_at        INTEGER NOT NULL,
        agent_id          TEXT NOT NULL,
        user_id           TEXT NOT NULL,
        idempotency_key   TEXT,
        PRIMARY KEY (room_id, source_entity_id, relationship_type, target_entity_id)
    ) STRICT, WITHOUT ROWID;
    CREATE INDEX relationships_by_target ON relationships (room_id, target_entity_id);

    CREATE TABLE artifacts (
        room_id            TEXT NOT NULL,
        artifact_id        TEXT NOT NULL,
        key                TEXT NOT NULL,
        content_type       TEXT NOT NULL,
        size               INTEGER NOT NULL,
        uploaded_by        TEXT NOT NULL,
        agent_id           TEXT NOT NULL,
        uploaded_at        INTEGER NOT NULL,
        description        TEXT,
        linked_finding_ids TEXT NOT NULL,
        linked_entity_ids  TEXT NOT NULL,
        idempotency_key    TEXT,
        PRIMARY KEY (room_id, artifact_id),
        UNIQUE (room_id, key)
    ) STRICT;

    CREATE TABLE idempotency (
        room_id     TEXT NOT NULL,
        key         TEXT NOT NULL,
        operation   TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        result_id   TEXT NOT NULL,
        created_at  INTEGER NOT NULL,
        PRIMARY KEY (room_id, key)
    ) STRICT, WITHOUT ROWID;

    CREATE TABLE meta (
        key   TEXT PRIMARY KEY,
        value TEXT NOT NULL
    ) STRICT;
    "#,
    // 2: counters kept by each append, so the room context and summary read no more than a row
    // per room and per tag however large the room; and no full-text table. Nothing queried
    // findings_fts (search keeps its own BM25 index per room in memory), yet every post wrote
    // several of its pages.
    r#"
    DROP TABLE findings_fts;
    ALTER TABLE rooms ADD COLUMN last_finding_at INTEGER;
    UPDATE rooms SET last_finding_at =
        (SELECT f.created_at FROM findings f WHERE f.room_id = rooms.room_id ORDER BY f.seq DESC LIMIT 1);
    CREATE TABLE room_tags (
        room_id  TEXT NOT NULL,
        tag      TEXT NOT NULL,
        findings INTEGER NOT NULL,
        PRIMARY KEY (room_id, tag)
    ) STRICT, WITHOUT ROWID;
    INSERT INTO room_tags (room_id, tag, findings)
        SELECT room_id, tag, count(*) FROM finding_tags GROUP BY room_id, tag;
    "#,
    // 3: names. "Claim" is reserved for an agent's claim on a piece of work; an entity holds
    // its identifiers.
    r#"
    ALTER TABLE identifier_claims RENAME TO identifier_holders;
    "#,
    // 4: the room's event feed and each agent's read position. A room's existing findings
    // become its first events, in their order (the other changes made before this version
    // were not recorded and are not invented).
    r#"
    ALTER TABLE rooms ADD COLUMN last_event INTEGER NOT NULL DEFAULT 0;
    CREATE TABLE events (
        room_id     TEXT NOT NULL,
        seq         INTEGER NOT NULL,
        kind        TEXT NOT NULL,
        at          INTEGER NOT NULL,
        user_id     TEXT NOT NULL,
        agent_id    TEXT,
        finding_id  TEXT,
        entity_ids  TEXT NOT NULL,
        artifact_id TEXT,
        summary     TEXT NOT NULL,
        PRIMARY KEY (room_id, seq)
    ) STRICT, WITHOUT ROWID;
    INSERT INTO events (room_id, seq, kind, at, user_id, agent_id, finding_id, entity_ids, summary)
        SELECT room_id, seq, 'finding_posted', created_at, user_id, agent_id, finding_id, '[]',
               substr(trim(replace(replace(content, char(10), ' '), char(13), ' ')), 1, 160)
        FROM findings;
    UPDATE rooms SET last_event = last_seq;
    CREATE TABLE read_positions (
        room_id  TEXT NOT NULL,
        agent_id TEXT NOT NULL,
        seq      INTEGER NOT NULL,
        PRIMARY KEY (room_id, agent_id)
    ) STRICT, WITHOUT ROWID;
    "#,
    // 5: claims on work, one per room and key; `doc` is the claim as JSON, the columns are
    // what the conditional write and the listing read.
    r#"
    CREATE TABLE claims (
        room_id     TEXT NOT NULL,
        key         TEXT NOT NULL,
        agent_id    TEXT NOT NULL,
        expires_at  INTEGER NOT NULL,
        released_at INTEGER,
        claimed_at  INTEGER NOT NULL,
        doc         TEXT NOT NULL,
        PRIMARY KEY (room_id, key)
    ) STRICT, WITHOUT ROWID;
    "#,
    // 6: threads and mentions.
    r#"
    ALTER TABLE findings ADD COLUMN reply_to TEXT;
    ALTER TABLE findings ADD COLUMN mentions TEXT NOT NULL DEFAULT '[]';
    CREATE INDEX findings_by_reply ON findings (room_id, reply_to) WHERE reply_to IS NOT NULL;
    "#,
    // 7: the decision queue; `doc` is the decision as JSON, `answered` says whether it has an
    // answer (the condition of the first-answer-wins update, and the open listing).
    r#"
    CREATE TABLE decisions (
        room_id     TEXT NOT NULL,
        decision_id TEXT NOT NULL,
        answered    INTEGER NOT NULL DEFAULT 0,
        doc         TEXT NOT NULL,
        PRIMARY KEY (room_id, decision_id)
    ) STRICT, WITHOUT ROWID;
    "#,
    // 8: hypotheses and verdicts (`standing`: the latest verdict on a finding, as JSON); which
    // findings name which entity, for "the findings about this entity"; the room's steering
    // record (`record`: resolution, objective history and markers as JSON) under a version the
    // compare-and-set update checks.
    r#"
    ALTER TABLE findings ADD COLUMN hypothesis INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE findings ADD COLUMN verdict TEXT;
    ALTER TABLE findings ADD COLUMN standing TEXT;
    CREATE TABLE finding_entities (
        room_id   TEXT NOT NULL,
        entity_id TEXT NOT NULL,
        seq       INTEGER NOT NULL,
        PRIMARY KEY (room_id, entity_id, seq)
    ) STRICT, WITHOUT ROWID;
    INSERT OR IGNORE INTO finding_entities (room_id, entity_id, seq)
        SELECT f.room_id, j.value, f.seq FROM findings f, json_each(f.entity_refs) j;
    ALTER TABLE rooms ADD COLUMN record TEXT NOT NULL DEFAULT '{}';
    ALTER TABLE rooms ADD COLUMN version INTEGER NOT NULL DEFAULT 0;
    "#,
    // 9: erasure (`erased`: who erased a finding or an artifact, when and why, as JSON).
    r#"
    ALTER TABLE findings ADD COLUMN erased TEXT;
    ALTER TABLE artifacts ADD COLUMN erased TEXT;
    "#,
    // 10: protocol sessions (MCP), so that a client's session outlives the server process:
    // `key` is a digest of the session id, `joined` the agent it acts as per room (JSON);
    // `ended` once its client ended it; purged by `keep_until`.
    r#"
    CREATE TABLE protocol_sessions (
        key        TEXT PRIMARY KEY,
        opening    TEXT NOT NULL,
        joined     TEXT NOT NULL,
        expires_at INTEGER NOT NULL,
        keep_until INTEGER NOT NULL,
        ended      INTEGER NOT NULL DEFAULT 0
    ) STRICT, WITHOUT ROWID;
    CREATE INDEX protocol_sessions_by_keep ON protocol_sessions (keep_until);
    "#,
];

/// The schema version this build writes.
pub(crate) const VERSION: i64 = MIGRATIONS.len() as i64;

/// Brings the database to [`VERSION`], refusing a database written by a newer build.
pub(crate) fn migrate(conn: &mut Connection) -> Result<(), MigrateError> {
    let current: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    if current > VERSION {
        return Err(MigrateError::TooNew { found: current, supported: VERSION });
    }
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(current as usize) {
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Exclusive)?;
        tx.execute_batch(sql)?;
        tx.pragma_update(None, "user_version", (i + 1) as i64)?;
        tx.commit()?;
    }
    Ok(())
}

#[derive(Debug)]
pub(crate) enum MigrateError {
    Sqlite(rusqlite::Error),
    TooNew { found: i64, supported: i64 },
}

impl From<rusqlite::Error> for MigrateError {
    fn from(e: rusqlite::Error) -> Self {
        MigrateError::Sqlite(e)
    }
}
