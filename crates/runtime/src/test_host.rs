//! The OpenMP host the unit tests give the runtime: offloading by default, device 0 the
//! default device, no mappers (the integration tests have their own in tests/common).

use crate::{MapperComponents, OpenMpHost};

pub(crate) struct Host;

impl OpenMpHost for Host {
    fn target_offload(&self) -> i32 {
        1
    }
    fn default_device(&self) -> i32 {
        0
    }
    fn call_mapper(&self, _: usize, _: usize, _: usize, _: i64, _: i64, _: usize) -> MapperComponents {
        MapperComponents::default()
    }
}
