//! # macp-testkit
//!
//! The conformance suite every MACP backend passes. Each rule of the domain is one
//! `pub async fn` in [`cases`] (plus property tests in [`props`]); the
//! [`conformance_tests!`] macro expands into one named `#[test]` per case for a backend
//! factory, so a failure names the rule and the backend at once.
//!
//! ## Running the suite against a backend
//!
//! In the backend crate, add `macp-testkit` as a dev-dependency and create
//! `tests/conformance.rs`:
//!
//! ```
//! // tests/conformance.rs of your backend crate (here with the in-memory reference store).
//! async fn backend() -> Option<macp_testkit::Backend> {
//!     Some(macp_testkit::Backend::new(std::sync::Arc::new(macp_core::memory::MemoryStore::new())))
//! }
//! // The store keeps nothing across a restart and has neither vectors nor artifacts: the cases
//! // for those are listed as ignored, with the feature they need.
//! macp_testkit::conformance_tests!(backend, features = [keywords]);
//! # fn main() {}
//! ```
//!
//! A single case is a plain async function, handy while making one rule pass:
//!
//! ```
//! # #[tokio::main]
//! # async fn main() {
//! use std::sync::Arc;
//! let backend = macp_testkit::Backend::new(Arc::new(macp_core::memory::MemoryStore::new()));
//! macp_testkit::cases::room_context_cursor_polls_exactly_what_came_after(backend).await;
//! # }
//! ```
//!
//! Then `cargo test -p my-backend --test conformance`. Every case gets a fresh backend from the
//! factory and works in rooms it creates itself.
//!
//! ## Writing a third backend
//!
//! See `GUIDE.md` next to this crate's manifest: it walks from an empty crate to a passing run.
//! In short: implement the five store traits of `macp_core::store` and `Store`, honouring the
//! contract written on each method (atomicity, ordering, what a lost race returns); declare
//! only the [`Capabilities`](macp_core::Capabilities) you really have; run the suite; read the
//! failing case's name — it is the rule you broke.

use std::any::Any;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use async_trait::async_trait;
use macp_core::blob::{BlobStore, PresignedRequest};
use macp_core::search::VectorIndex;
use macp_core::{Clock, Macp, Store, Timestamp};

pub mod cases;
pub mod props;

#[doc(hidden)]
pub use tokio as __tokio;

/// A backend under test: a store, plus whatever must stay alive as long as it (a temporary
/// directory, a server handle), plus an optional way to open the same data again.
pub struct Backend {
    /// The store.
    pub store: Arc<dyn Store>,
    /// The backend's vector index, if it has one (search cases skip without it).
    pub vector_index: Option<Arc<dyn VectorIndex>>,
    /// The backend's artifact storage and a way to use its presigned URLs (artifact cases skip
    /// without them).
    pub blobs: Option<(Arc<dyn BlobStore>, Arc<dyn Transfer>)>,
    /// Opens a second store on the same data (used to check durability).
    pub reopen: Option<Arc<dyn Fn() -> Arc<dyn Store> + Send + Sync>>,
    /// Reads the backend's raw storage (every table, bucket and index) for a text: used to
    /// check that a purge leaves nothing (see [`Backend::with_leftovers`]).
    pub leftovers: Option<Arc<dyn Leftovers>>,
    _guard: Option<Box<dyn Any + Send + Sync>>,
}

/// Where a text still appears in a backend's raw storage, read beneath the store's API.
#[async_trait]
pub trait Leftovers: Send + Sync {
    /// Every place (table and key, object key, vector key) holding `needle` anywhere: keys,
    /// attributes, metadata, contents. Empty when there is none.
    async fn find(&self, needle: &str) -> Vec<String>;
}

impl fmt::Debug for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Backend").field("store", &self.store.name()).finish_non_exhaustive()
    }
}

impl Backend {
    /// A backend with nothing to keep alive.
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self { store, vector_index: None, blobs: None, reopen: None, leftovers: None, _guard: None }
    }

    /// Declares how to search the backend's raw storage (the purge cases then scan it).
    pub fn with_leftovers(mut self, leftovers: Arc<dyn Leftovers>) -> Self {
        self.leftovers = Some(leftovers);
        self
    }

    /// Declares the backend's vector index.
    pub fn with_vector_index(mut self, index: Arc<dyn VectorIndex>) -> Self {
        self.vector_index = Some(index);
        self
    }

    /// Declares the backend's artifact storage, and how to PUT to and GET from its URLs.
    pub fn with_blobs(mut self, blobs: Arc<dyn BlobStore>, transfer: Arc<dyn Transfer>) -> Self {
        self.blobs = Some((blobs, transfer));
        self
    }

    /// Keeps `guard` alive as long as the backend (dropped after the case).
    pub fn with_guard(mut self, guard: impl Any + Send + Sync) -> Self {
        self._guard = Some(Box::new(guard));
        self
    }

    /// Declares how to open the same data again.
    pub fn with_reopen(mut self, reopen: impl Fn() -> Arc<dyn Store> + Send + Sync + 'static) -> Self {
        self.reopen = Some(Arc::new(reopen));
        self
    }

    /// A service over this backend with a [`ManualClock`], for cases that need controlled time.
    /// (Its artifact URLs expire in the clock's past; artifact cases use the wall clock.)
    pub fn service(&self) -> (Macp, Arc<ManualClock>) {
        let clock = Arc::new(ManualClock::new());
        let mut b = Macp::builder().store(self.store.clone()).clock(clock.clone());
        if let Some((blobs, _)) = &self.blobs {
            b = b.blob_store(blobs.clone());
        }
        let macp = b.build().unwrap_or_else(|e| panic!("building the service failed: {e}"));
        (macp, clock)
    }
}

/// Uses a backend's presigned URLs the way an agent would: an HTTP PUT or GET, or the
/// backend's in-process equivalent.
#[async_trait]
pub trait Transfer: Send + Sync {
    /// PUTs `body` to the upload URL with `content_type`; returns the HTTP status.
    async fn put(&self, upload: &PresignedRequest, content_type: &str, body: Vec<u8>) -> u16;
    /// GETs a download URL; returns the status and the body.
    async fn get(&self, url: &str) -> (u16, Vec<u8>);
}

/// A clock tests move by hand.
#[derive(Debug)]
pub struct ManualClock {
    ms: AtomicI64,
}

impl ManualClock {
    /// Starts at the current wall-clock time (presigned URLs are checked against real time).
    pub fn new() -> Self {
        Self { ms: AtomicI64::new(Timestamp::now().as_millis()) }
    }

    /// Moves the clock (forward, or back with a negative value).
    pub fn advance_ms(&self, ms: i64) {
        self.ms.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        Timestamp::from_millis(self.ms.load(Ordering::SeqCst))
    }
}

/// Expands into one `#[test]` per conformance case and property for a backend factory (an
/// `async fn() -> Option<Backend>`), given the optional features the backend has:
///
/// - `durable`: acknowledged writes survive a reopen ([`Backend::with_reopen`]; the store
///   declares [`Capabilities::durable`](macp_core::Capabilities)).
/// - `shared`: several stores on the same data (the reopen) serve at once, keeping every
///   guarantee ([`Capabilities::shared_across_processes`](macp_core::Capabilities)).
/// - `keywords`: the store answers [`FindingStore::keyword_search`](macp_core::store::FindingStore::keyword_search).
/// - `vectors`: a vector index ([`Backend::with_vector_index`]).
/// - `blobs`: artifact storage ([`Backend::with_blobs`]).
/// - `bounded_urls`: the artifact store itself refuses an upload outside its URL's bounds
///   ([`BlobStore::enforces_presigned_bounds`](macp_core::blob::BlobStore::enforces_presigned_bounds);
///   an emulator may not).
///
/// A case that needs a feature the backend lacks is generated `#[ignore]`d, with the reason, so
/// `cargo test` lists it as ignored, never as passed; one extra test checks that the features
/// declared here are exactly what the backend has. `ignore = "reason"` ignores every case (a
/// backend that needs an external service: run them with `cargo test -- --ignored` once it is
/// up); the factory returning `None` then fails the test rather than passing it.
///
/// ```ignore
/// macp_testkit::conformance_tests!(my_factory, features = [durable, keywords, vectors, blobs, bounded_urls]);
/// ```
#[macro_export]
macro_rules! conformance_tests {
    ($factory:path, features = [$($feature:ident),* $(,)?] $(, ignore = $all:literal)? $(,)?) => {
        $crate::__cases!($factory, [$($feature),*], [$($all)?]; core;
            create_room_assigns_id_and_defaults,
            create_room_refuses_bad_input_and_writes_nothing,
            list_rooms_pages_newest_first_and_filters_by_status,
            closed_room_stays_readable_and_refuses_writes,
            close_room_is_idempotent,
            join_room_is_idempotent_for_the_same_user,
            agents_belong_to_the_user_who_joined_them,
            writes_require_a_joined_agent,
            agents_per_room_capacity_is_refused_with_its_limit,
            status_is_advisory_and_gates_nothing,
            presence_says_done_left_and_stale,
            post_finding_commits_pending_in_sequence_with_attribution,
            idempotent_post_returns_first_result_and_writes_nothing,
            idempotency_key_reused_with_other_payload_conflicts,
            concurrent_retries_with_one_key_write_once,
            input_limits_refuse_and_never_truncate,
            entity_refs_must_exist_in_the_room,
            timeline_filters_by_tag_agent_and_time_and_pages,
            timeline_cursor_is_bound_to_room_and_filters,
            updates_return_every_finding_once_in_commit_order,
            updates_never_skip_or_repeat_with_concurrent_writers,
            updates_cursor_belongs_to_its_room,
            threads_and_mentions_reach_the_right_agent,
            full_visibility_shows_every_member_the_same_record,
            rooms_are_isolated,
            shared_identifier_attaches_to_the_existing_entity,
            concurrent_adds_sharing_an_identifier_yield_one_entity,
            idempotent_add_entity_replays_the_first_result,
            entity_limits_refuse_and_never_truncate,
            merge_is_lazy_and_aliases_resolve_on_every_read,
            merge_chains_resolve_without_cycles,
            merge_refuses_to_exceed_the_identifier_limit,
            concurrent_opposite_merges_never_form_a_cycle,
            repeated_relationship_adds_evidence_to_one_edge,
            a_repeated_relationship_keeps_its_first_description_and_evidence_order,
            entity_identifiers_stay_a_sorted_set_through_attach_and_merge,
            relationship_endpoints_must_exist_and_differ,
            idempotent_add_relationship_replays,
            entity_graph_walks_to_depth_and_refuses_deeper,
            room_summary_counts_are_exact,
            room_context_is_bounded_in_a_large_room,
            room_context_lists_the_most_used_tags_within_budget,
            room_context_cursor_polls_exactly_what_came_after,
            a_newcomer_orients_in_a_2000_finding_room,
            every_change_appears_once_in_commit_order,
            writes_that_change_nothing_add_no_event,
            updates_filter_by_kind_under_one_cursor,
            read_positions_move_forward_only_on_ack,
            a_waiting_reader_wakes_on_a_commit,
            an_old_findings_cursor_is_refused_with_advice,
            an_unknown_room_has_no_feed,
            a_session_carries_its_joins_to_every_server_of_the_store,
            a_session_ends_when_idle_and_is_purged,
            one_of_sixteen_concurrent_claimers_holds_the_work,
            claims_renew_release_and_lapse,
            a_person_releases_an_agents_stale_claim,
            decisions_wait_for_the_people_and_record_who_answered,
            objective_history_and_phase_markers_are_kept,
            close_with_resolution_then_reopen,
            the_directed_exchange_budget_stops_a_loop_until_a_person_acts,
            verdicts_give_a_finding_its_standing_everywhere,
            findings_about_an_entity_include_merged_aliases,
            an_entity_is_found_by_identifier_without_creating_it,
            a_digest_since_a_marker_is_bounded_with_exact_totals,
            secrets_are_redacted_before_anything_is_stored,
            redaction_comes_before_the_length_limit,
            a_text_far_over_every_limit_is_refused_unread,
            an_erased_finding_leaves_only_a_notice,
            an_expired_room_is_purged_everywhere,
            a_room_is_kept_while_open_reopened_or_held,
            a_members_only_room_does_not_exist_for_others,
            a_room_survives_export_and_import_intact,
            a_room_bigger_than_a_page_moves_whole,
            an_export_names_an_artifact_whose_bytes_are_lost,
            an_export_scrubs_with_the_redactor,
        );
        $crate::__cases!($factory, [$($feature),*], [$($all)?]; durable;
            acknowledged_writes_survive_reopen,
        );
        $crate::__cases!($factory, [$($feature),*], [$($all)?]; shared;
            two_stores_on_the_same_data_keep_one_sequence,
            a_write_elsewhere_wakes_a_waiting_reader,
        );
        $crate::__cases!($factory, [$($feature),*], [$($all)?]; keywords;
            pending_findings_are_found_by_their_words,
            a_rooms_first_findings_are_found_by_their_words,
            search_finds_an_exact_identifier_first,
            search_stays_in_its_room_and_honours_filters,
            search_across_rooms_finds_past_incidents_and_names_them,
        );
        $crate::__cases!($factory, [$($feature),*], [$($all)?]; vectors;
            search_finds_a_paraphrase_without_shared_words,
            posts_are_indexed_inline_and_searchable_at_once,
            failed_indexing_loses_nothing_and_reconciles_exactly_once,
            an_index_write_reported_as_failed_is_not_duplicated,
            an_index_built_by_another_model_is_refused_until_reindexed,
            an_erased_findings_vector_is_deleted,
        );
        $crate::__cases!($factory, [$($feature),*], [$($all)?]; blobs;
            register_artifact_checks_prefix_and_links,
            list_artifacts_filters_by_finding_and_entity_alias,
            idempotent_register_artifact_replays,
            merged_entities_keep_their_artifacts,
            a_registered_artifact_is_an_event,
            artifacts_round_trip_through_presigned_urls,
            registering_a_key_never_uploaded_is_not_found,
            registration_refuses_an_object_outside_the_limits,
            upload_requests_refuse_limits_and_path_like_names,
            an_erased_artifact_loses_its_bytes,
        );
        $crate::__cases!($factory, [$($feature),*], [$($all)?]; bounded_urls;
            upload_urls_accept_only_their_key_type_size_and_time,
        );
        $crate::__props!($factory, [$($all)?];
            prop_updates_never_skip_or_repeat,
            prop_idempotent_writes_write_once,
            prop_merges_resolve_from_any_alias,
        );
        $crate::__one_test!([$($all)?], declared_features_match_the_backend, {
            let rt = $crate::__tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime");
            rt.block_on(async {
                let backend = $factory().await.expect("backend not configured");
                $crate::cases::declared_features_match_the_backend(backend, &[$(stringify!($feature)),*]).await
            });
        });
    };
}

/// The features a backend may declare to [`conformance_tests!`].
pub const FEATURES: &[&str] = &["durable", "shared", "keywords", "vectors", "blobs", "bounded_urls"];

#[doc(hidden)]
#[macro_export]
macro_rules! __cases {
    ($factory:path, $features:tt, $ignore:tt; $group:ident; $($case:ident),+ $(,)?) => {
        $(
            $crate::__if_has!($group, $features, {
                $crate::__one_test!($ignore, $case, { $crate::__run!($factory, $case) });
            }, {
                #[test]
                #[ignore = concat!("the backend does not declare `", stringify!($group), "`")]
                fn $case() {}
            });
        )+
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __one_test {
    ([], $name:ident, $body:block) => {
        #[test]
        fn $name() $body
    };
    ([$all:literal], $name:ident, $body:block) => {
        #[test]
        #[ignore = $all]
        fn $name() $body
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __run {
    ($factory:path, $case:ident) => {{
        let rt = $crate::__tokio::runtime::Builder::new_multi_thread()
            .worker_threads(4)
            .enable_all()
            .build()
            .expect("tokio runtime");
        rt.block_on(async {
            let backend = $factory().await.expect("backend not configured: the factory returned None");
            $crate::cases::$case(backend).await
        });
    }};
}

/// `$yes` when `$group` is `core` or among the features, else `$no`.
#[doc(hidden)]
#[macro_export]
macro_rules! __if_has {
    (core, [$($f:ident),*], {$($yes:tt)*}, {$($no:tt)*}) => { $($yes)* };
    ($g:ident, [], {$($yes:tt)*}, {$($no:tt)*}) => { $($no)* };
    (durable, [durable $(, $r:ident)*], {$($yes:tt)*}, {$($no:tt)*}) => { $($yes)* };
    (shared, [shared $(, $r:ident)*], {$($yes:tt)*}, {$($no:tt)*}) => { $($yes)* };
    (keywords, [keywords $(, $r:ident)*], {$($yes:tt)*}, {$($no:tt)*}) => { $($yes)* };
    (vectors, [vectors $(, $r:ident)*], {$($yes:tt)*}, {$($no:tt)*}) => { $($yes)* };
    (blobs, [blobs $(, $r:ident)*], {$($yes:tt)*}, {$($no:tt)*}) => { $($yes)* };
    (bounded_urls, [bounded_urls $(, $r:ident)*], {$($yes:tt)*}, {$($no:tt)*}) => { $($yes)* };
    ($g:ident, [$x:ident $(, $r:ident)*], $yes:tt, $no:tt) => { $crate::__if_has!($g, [$($r),*], $yes, $no); };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __props {
    ($factory:path, $ignore:tt; $($prop:ident),+ $(,)?) => {
        $(
            $crate::__one_test!($ignore, $prop, {
                $crate::props::$prop(|| async { $factory().await });
            });
        )+
    };
}

/// [`Transfer`] for [`macp_core::blob::MemoryBlobStore`]: its URLs are used in process, with the
/// same checks an HTTP endpoint makes.
#[derive(Debug, Clone)]
pub struct MemoryTransfer(pub Arc<macp_core::blob::MemoryBlobStore>);

#[async_trait]
impl Transfer for MemoryTransfer {
    async fn put(&self, upload: &PresignedRequest, content_type: &str, body: Vec<u8>) -> u16 {
        match self.0.put(&upload.url, content_type, body) {
            Ok(()) => 200,
            Err(macp_core::blob::UrlRefusal::Exists) => 409,
            Err(_) => 403,
        }
    }

    async fn get(&self, url: &str) -> (u16, Vec<u8>) {
        match self.0.get(url) {
            Ok(Some(b)) => (200, b),
            Ok(None) => (404, Vec::new()),
            Err(_) => (403, Vec::new()),
        }
    }
}

#[cfg(test)]
mod tests {
    /// Every case function in `src/cases/` is registered in [`conformance_tests!`] exactly once:
    /// a case written but not registered would never run for any backend.
    #[test]
    fn every_case_is_registered_once() {
        let sources = [
            include_str!("cases/rooms.rs"),
            include_str!("cases/agents.rs"),
            include_str!("cases/findings.rs"),
            include_str!("cases/entities.rs"),
            include_str!("cases/artifacts.rs"),
            include_str!("cases/search.rs"),
            include_str!("cases/durability.rs"),
            include_str!("cases/events.rs"),
            include_str!("cases/claims.rs"),
            include_str!("cases/decisions.rs"),
            include_str!("cases/steering.rs"),
            include_str!("cases/redaction.rs"),
            include_str!("cases/erasure.rs"),
            include_str!("cases/retention.rs"),
            include_str!("cases/members.rs"),
            include_str!("cases/portable.rs"),
            include_str!("cases/sessions.rs"),
        ];
        let lib = include_str!("lib.rs");
        let registry = &lib
            [lib.find("macro_rules! conformance_tests").unwrap()..lib.find("pub const FEATURES").unwrap()];
        let mut cases = Vec::new();
        for src in sources {
            for line in src.lines() {
                if let Some(rest) = line.strip_prefix("pub async fn ")
                    && let Some((name, args)) = rest.split_once('(')
                    && args.starts_with("backend: Backend)")
                {
                    cases.push(name.to_owned());
                }
            }
        }
        assert!(cases.len() > 60, "found {} case functions", cases.len());
        for c in &cases {
            let n = registry.matches(&format!("            {c},")).count();
            assert_eq!(n, 1, "case `{c}` is registered {n} times in conformance_tests!");
        }
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/cases");
        let files = std::fs::read_dir(dir).unwrap().count();
        assert_eq!(files, sources.len() + 1, "a file in src/cases/ is not read by this test (mod.rs aside)");
    }
}
