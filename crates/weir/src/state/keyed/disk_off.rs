//! The disk tier when the `disk-state` feature is off: types with no values, so the memory
//! backend compiles without the LSM and every disk branch is statically dead.

use std::marker::PhantomData;

use super::super::cow_map::CowMap;
use super::super::key_group::KeyGroupRange;
use super::incremental::ChangeSet;
use super::table::TableSnapshot;
use super::ttl::Ttl;
use crate::error::Result;
use crate::storage::shared_bytes::SharedBytes;

/// No restore into an LSM without the `disk-state` feature: nothing to report.
pub fn restore_report() -> Option<String> {
    None
}

/// No restore into an LSM without the `disk-state` feature: no figures to start afresh.
pub fn start_restore_report() {}

/// No LSM without the `disk-state` feature.
pub(crate) enum DiskStore {}

/// No disk tier without the `disk-state` feature.
pub(crate) enum DiskTier<K, S> {
    #[allow(dead_code)]
    Never(std::convert::Infallible, PhantomData<fn() -> (K, S)>),
}

/// No timers on disk without the `disk-state` feature.
pub(crate) enum DiskTimerOrder<K> {
    #[allow(dead_code)]
    Never(std::convert::Infallible, PhantomData<fn() -> K>),
}

impl<K> DiskTimerOrder<K> {
    fn never(&self) -> ! {
        match self {
            DiskTimerOrder::Never(n, _) => match *n {},
        }
    }
    pub(crate) fn insert(&mut self, _time: u64, _key: &K) -> Result<()> {
        self.never()
    }
    pub(crate) fn remove(&mut self, _time: u64, _key: &K) -> Result<()> {
        self.never()
    }
    pub(crate) fn remove_first(&mut self, _time: u64, _key: &K) -> Result<()> {
        self.never()
    }
    pub(crate) fn first(&self) -> Result<Option<(u64, K)>> {
        self.never()
    }
}

impl DiskStore {
    pub(crate) fn disk_bytes(&self) -> u64 {
        match *self {}
    }
    pub(crate) fn unconfirmed(&self) -> &super::remote::Unconfirmed {
        match *self {}
    }
    pub(crate) fn local_bound(&self) -> Option<u64> {
        match *self {}
    }
    pub(crate) fn table_bytes(&self) -> u64 {
        match *self {}
    }
    pub(crate) fn timer_order<K>(&self, _name: &str) -> Result<DiskTimerOrder<K>> {
        match *self {}
    }
    pub(crate) fn tier_in<K, S>(
        &self,
        _index: usize,
        _ns: Option<u64>,
        _max_parallelism: u32,
    ) -> Result<DiskTier<K, S>> {
        match *self {}
    }
    pub(crate) fn tier<K, S>(
        &self,
        _index: usize,
        _max_parallelism: u32,
    ) -> Result<DiskTier<K, S>> {
        match *self {}
    }
}

impl<K, S> DiskTier<K, S> {
    fn never(&self) -> ! {
        match self {
            DiskTier::Never(n, _) => match *n {},
        }
    }
    pub(crate) fn fault_in(
        &mut self,
        _map: &mut CowMap<K, S>,
        _ttl: Option<&mut Ttl<K>>,
        _key: &K,
        _write: bool,
    ) -> Result<()> {
        self.never()
    }
    pub(crate) fn len(&mut self, _map: &CowMap<K, S>, _ttl: Option<&Ttl<K>>) -> Result<usize> {
        self.never()
    }
    pub(crate) fn keys(&mut self, _map: &CowMap<K, S>, _ttl: Option<&Ttl<K>>) -> Result<Vec<K>> {
        self.never()
    }
    pub(crate) fn maybe_sweep(
        &mut self,
        _map: &CowMap<K, S>,
        _ttl: &Ttl<K>,
        _now: u64,
    ) -> Result<()> {
        self.never()
    }
    pub(crate) fn clear(&mut self) -> Result<()> {
        self.never()
    }
    pub(crate) fn stream(
        &mut self,
        _map: &CowMap<K, S>,
        _ttl: Option<&Ttl<K>>,
        _now: u64,
    ) -> Result<std::iter::Empty<(K, S)>> {
        self.never()
    }
    pub(crate) fn for_each(
        &mut self,
        _map: &CowMap<K, S>,
        _ttl: Option<&Ttl<K>>,
        _f: impl FnMut(&K, &S, Option<u64>),
    ) -> Result<()> {
        self.never()
    }
    pub(crate) fn snapshot(
        &mut self,
        _map: &mut CowMap<K, S>,
        _ttl: Option<&mut Ttl<K>>,
        _range: KeyGroupRange,
    ) -> Result<Option<Box<dyn TableSnapshot>>> {
        self.never()
    }
    pub(crate) fn restore(
        &mut self,
        _what: &str,
        _sections: &[SharedBytes],
        _ttl: bool,
    ) -> Result<()> {
        self.never()
    }
    pub(crate) fn take_changes(
        &mut self,
        _map: &mut CowMap<K, S>,
        _ttl: Option<&mut Ttl<K>>,
    ) -> Result<Option<ChangeSet>> {
        self.never()
    }
    pub(crate) fn delta_snapshot(
        &mut self,
        _map: &mut CowMap<K, S>,
        _ttl: Option<&mut Ttl<K>>,
        _sets: Vec<std::sync::Arc<ChangeSet>>,
        _range: KeyGroupRange,
    ) -> Result<Option<Box<dyn TableSnapshot>>> {
        self.never()
    }
    pub(crate) fn restore_chain(
        &mut self,
        _what: &str,
        _sections: &[SharedBytes],
        _changes: &[SharedBytes],
        _ttl: bool,
    ) -> Result<()> {
        self.never()
    }
    pub(crate) fn apply_changes(
        &mut self,
        _what: &str,
        _sections: &[SharedBytes],
        _ttl: bool,
    ) -> Result<()> {
        self.never()
    }
    #[cfg(all(test, feature = "disk-state"))]
    pub(crate) fn remote_groups(&self) -> usize {
        self.never()
    }
    pub(crate) fn repoint_remote(
        &mut self,
        _name: &str,
        _chain: Option<&super::remote::ConfirmedChain>,
    ) -> Result<()> {
        self.never()
    }
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn evict(
        &mut self,
        _map: &mut CowMap<K, S>,
        _ttl: Option<&mut Ttl<K>>,
        _state: &std::sync::Arc<super::remote::RemoteState>,
        _chain: &super::remote::ConfirmedChain,
        _sets: &[std::sync::Arc<ChangeSet>],
        _range: KeyGroupRange,
        _to_free: u64,
    ) -> Result<u64> {
        self.never()
    }
    pub(crate) fn set_remote(
        &mut self,
        _state: std::sync::Arc<super::remote::RemoteState>,
        _remote: Vec<super::RemoteSection>,
    ) {
        self.never()
    }
}
