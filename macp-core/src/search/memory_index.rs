//! The in-memory reference [`VectorIndex`]: an exact scan under one lock.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard};

use async_trait::async_trait;

use super::{IndexModel, VectorFilter, VectorHit, VectorIndex, VectorRecord, dot, model_mismatch, top_k};
use crate::error::{Error, Result};
use crate::ids::{FindingId, RoomId};

/// An exact in-memory vector index.
#[derive(Debug, Default)]
pub struct MemoryVectorIndex {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    model: Option<IndexModel>,
    rooms: HashMap<RoomId, BTreeMap<FindingId, VectorRecord>>,
}

impl MemoryVectorIndex {
    /// An empty, unbound index.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[async_trait]
impl VectorIndex for MemoryVectorIndex {
    fn name(&self) -> &'static str {
        "memory"
    }

    async fn model(&self) -> Result<Option<IndexModel>> {
        Ok(self.lock().model.clone())
    }

    async fn bind(&self, model: &IndexModel) -> Result<()> {
        let mut s = self.lock();
        match &s.model {
            Some(m) if m == model => Ok(()),
            Some(m) => Err(model_mismatch(m, model)),
            None => {
                s.model = Some(model.clone());
                Ok(())
            }
        }
    }

    async fn reset(&self, model: &IndexModel) -> Result<()> {
        let mut s = self.lock();
        s.rooms.clear();
        s.model = Some(model.clone());
        Ok(())
    }

    async fn upsert(&self, records: &[VectorRecord]) -> Result<()> {
        let mut s = self.lock();
        if let Some(m) = &s.model
            && let Some(bad) = records.iter().find(|r| r.vector.len() != m.dimension)
        {
            return Err(Error::invalid(
                "vector",
                format!("vector of length {} for an index of dimension {}", bad.vector.len(), m.dimension),
            ));
        }
        for r in records {
            s.rooms.entry(r.room_id).or_default().insert(r.finding_id, r.clone());
        }
        Ok(())
    }

    async fn delete(&self, room_id: RoomId, ids: &[FindingId]) -> Result<()> {
        if let Some(room) = self.lock().rooms.get_mut(&room_id) {
            for id in ids {
                room.remove(id);
            }
        }
        Ok(())
    }

    async fn query(
        &self,
        room_id: RoomId,
        vector: &[f32],
        k: usize,
        filter: &VectorFilter,
    ) -> Result<Vec<VectorHit>> {
        let s = self.lock();
        let Some(room) = s.rooms.get(&room_id) else { return Ok(Vec::new()) };
        let mut hits: Vec<VectorHit> = room
            .values()
            .filter(|r| filter.matches(&r.tags, &r.agent_id))
            .map(|r| VectorHit { finding_id: r.finding_id, score: dot(&r.vector, vector) })
            .collect();
        top_k(&mut hits, k, VectorHit::rank);
        Ok(hits)
    }

    async fn scores(&self, room_id: RoomId, vector: &[f32], ids: &[FindingId]) -> Result<Vec<VectorHit>> {
        let s = self.lock();
        let Some(room) = s.rooms.get(&room_id) else { return Ok(Vec::new()) };
        Ok(ids
            .iter()
            .filter_map(|id| room.get(id))
            .map(|r| VectorHit { finding_id: r.finding_id, score: dot(&r.vector, vector) })
            .collect())
    }

    async fn count(&self, room_id: RoomId) -> Result<u64> {
        Ok(self.lock().rooms.get(&room_id).map_or(0, |r| r.len() as u64))
    }
}
