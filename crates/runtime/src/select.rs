//! Where a construct runs (LLVM's `checkDeviceAndCtors`): the offload policy, the device
//! number, the device's state and its images, with the reasons a construct cannot run as
//! values ([`SelectError`]) that the construct reports.

use crate::device::LoadError;
use crate::error::{Diagnostic, Lines};
use crate::{Loc, Policy, Runtime, Target};
use std::fmt;

/// Why a construct cannot run on the device it names: the lines users know, printed by the
/// construct ([`crate::error::report`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SelectError {
    /// No offload device exists; `unavailable` says, for each configured backend whose
    /// devices are missing, why.
    NoDevices { id: i64, unavailable: Vec<String> },
    /// Under `OMP_TARGET_OFFLOAD=MANDATORY`, a number at or past the host's names a device of
    /// a backend that is missing (a remote server that is down), for these reasons.
    Unavailable { id: i64, unavailable: Vec<String> },
    /// The number names no device (`loc`: the construct's place, when known).
    OutOfRange { id: i64, devices: i32, loc: Option<String> },
    /// The device was lost earlier; that was reported when it happened.
    Lost { device: i32 },
    /// The device's images could not be loaded or bound.
    Load { device: i32, error: LoadError },
}

impl fmt::Display for SelectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let unavailable = |f: &mut fmt::Formatter<'_>, id: i64, reasons: &[String]| -> fmt::Result {
            for (k, why) in reasons.iter().enumerate() {
                let sep = if k == 0 { "" } else { "\n" };
                write!(f, "{sep}Device number '{id}' is not available: {why}")?;
            }
            Ok(())
        };
        match self {
            SelectError::NoDevices { id, unavailable: reasons } => {
                f.write_str("No devices available for the target construct")?;
                if !reasons.is_empty() {
                    f.write_str("\n")?;
                }
                unavailable(f, *id, reasons)
            }
            SelectError::Unavailable { id, unavailable: reasons } => unavailable(f, *id, reasons),
            SelectError::OutOfRange { id, devices: n, loc } => write!(
                f,
                "{}Device number '{id}' out of range, only {n} devices available (valid numbers are 0..{}, and {n} for the host)",
                loc.as_deref().map(|l| format!("{l}: ")).unwrap_or_default(),
                n - 1
            ),
            SelectError::Lost { device } => write!(f, "device {device} was lost"),
            SelectError::Load { device, error } => write!(f, "Failed to init globals on device {device}: {error}"),
        }
    }
}

impl Diagnostic for SelectError {
    /// An `omptarget error:` line for each line of the text. A lost device has none: its
    /// loss was said when it happened.
    fn write_lines(&self, out: &mut Lines<'_>) -> fmt::Result {
        if let SelectError::Lost { .. } = self {
            return Ok(());
        }
        for line in self.to_string().lines() {
            out.error(format_args!("{line}"))?;
        }
        Ok(())
    }
}

impl std::error::Error for SelectError {}

impl Runtime {
    /// LLVM's `checkDeviceAndCtors`: decides where a construct runs and loads the device's
    /// images on first use.
    #[link_section = ".text.hot.omp_launch"]
    pub fn check_device(&self, device_id: i64, loc: Loc) -> Result<Target, SelectError> {
        if self.policy() == Policy::Disabled {
            return Ok(Target::Host);
        }
        let id = self.resolve_device(device_id);
        let n = self.num_devices();
        if n == 0 {
            return Err(SelectError::NoDevices { id, unavailable: self.unavailable_backends() });
        }
        // A number at or past the host's names a device of a backend that is missing (a
        // remote server that is down): under MANDATORY that is an error that says why, not
        // a silent run on the host.
        if id >= i64::from(n) && self.host().target_offload() == 2 {
            let unavailable = self.unavailable_backends();
            if !unavailable.is_empty() {
                return Err(SelectError::Unavailable { id, unavailable });
            }
        }
        if id == i64::from(n) {
            return Ok(Target::Host);
        }
        let Some(dev) = i32::try_from(id).ok().and_then(|i| self.device(i)) else {
            let l = loc.parse();
            return Err(SelectError::OutOfRange { id, devices: n, loc: l.is_known().then(|| l.to_string()) });
        };
        if dev.lost().is_some() {
            return Err(SelectError::Lost { device: dev.id });
        }
        if let Err(error) = self.ensure_loaded(&dev) {
            return Err(SelectError::Load { device: dev.id, error });
        }
        Ok(Target::Device(dev))
    }

    /// Why each configured backend whose devices are missing has none.
    fn unavailable_backends(&self) -> Vec<String> {
        self.plugins.iter().filter_map(|p| p.unavailable()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_texts_users_know() {
        let none = SelectError::NoDevices { id: 2, unavailable: vec!["no server".into(), "no driver".into()] };
        assert_eq!(
            none.to_string(),
            "No devices available for the target construct\nDevice number '2' is not available: no server\n\
             Device number '2' is not available: no driver"
        );
        let bare = SelectError::NoDevices { id: 0, unavailable: vec![] };
        assert_eq!(bare.to_string().lines().count(), 1);
        let far = SelectError::OutOfRange { id: 7, devices: 4, loc: Some("a.c:3:1".into()) };
        assert_eq!(
            far.to_string(),
            "a.c:3:1: Device number '7' out of range, only 4 devices available (valid numbers are 0..3, and 4 for the host)"
        );
        let unknown = SelectError::OutOfRange { id: 7, devices: 4, loc: None };
        assert!(unknown.to_string().starts_with("Device number '7' out of range"));
    }
}
