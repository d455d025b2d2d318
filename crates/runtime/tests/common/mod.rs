//! Shared by the runtime's integration tests: the libomp stand-in and a runtime over one
//! mock device.

use omp_format::{EntryLayout, OffloadEntry};
use omp_plugin::mock::{MockDevice, MockPlugin, SharedMock};
use omp_runtime::{BinaryImage, Config, Descriptor, MapperComponents, OpenMpHost, Runtime};
use std::sync::Arc;

/// libomp as the tests need it: default policy, device 0, no mappers.
pub struct Host;

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

/// A runtime with one mock device and a registered image for it.
pub fn runtime_with(config: Config) -> (Runtime, Arc<MockDevice>) {
    let mock = SharedMock::default();
    let dev = mock.0.clone();
    let rt = Runtime::new(config, Box::new(Host), vec![Box::new(MockPlugin(mock))]);
    // SAFETY: no entries, so nothing of the program's to vouch for.
    unsafe {
        rt.register_lib(Descriptor {
            key: 1,
            images: vec![BinaryImage { bytes: b"MOCK image".as_slice().into() }],
            entries: Vec::<OffloadEntry>::new(),
            layout: EntryLayout::V1,
        })
    };
    assert_eq!(rt.num_devices(), 1);
    (rt, dev)
}
