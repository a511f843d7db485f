//! The disk tier when the `disk-state` feature is off: types with no values, so the memory
//! backend compiles without the LSM and every disk branch is statically dead.

use std::marker::PhantomData;

use super::super::cow_map::CowMap;
use super::super::key_group::KeyGroupRange;
use super::table::TableSnapshot;
use super::ttl::Ttl;
use crate::error::Result;
use crate::storage::shared_bytes::SharedBytes;

/// No LSM without the `disk-state` feature.
pub(crate) enum DiskStore {}

/// No disk tier without the `disk-state` feature.
pub(crate) enum DiskTier<K, S> {
    #[allow(dead_code)]
    Never(std::convert::Infallible, PhantomData<fn() -> (K, S)>),
}

impl DiskStore {
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
    pub(crate) fn load(
        &mut self,
        _map: &mut CowMap<K, S>,
        _ttl: Option<&mut Ttl<K>>,
        _key: &K,
    ) -> Result<()> {
        self.never()
    }
    pub(crate) fn len(&mut self, _map: &CowMap<K, S>, _ttl: Option<&Ttl<K>>) -> Result<usize> {
        self.never()
    }
    pub(crate) fn keys(&mut self, _map: &CowMap<K, S>, _ttl: Option<&Ttl<K>>) -> Result<Vec<K>> {
        self.never()
    }
    pub(crate) fn snapshot(
        &mut self,
        _map: &CowMap<K, S>,
        _ttl: Option<&Ttl<K>>,
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
}
