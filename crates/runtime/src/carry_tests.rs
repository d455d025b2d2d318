//! Trips of entered data under `LIBOMPTARGET_SPREAD`, on three mock devices of one plugin
//! (the runtime and its kernel from `spread_tests.rs`: it adds one to four `u64`s).

use super::*;
use crate::data::Directive;
use crate::spread::tests::{counting_runtime, last_mocks, region, runtime, Arrays, TOFROM};
use std::sync::atomic::Ordering;

/// A one-region launch of the test kernel over `region_args`.
fn launch(region_args: &mut Arrays) -> KernelLaunch<'_> {
    KernelLaunch::one_thread(region_args.args())
}

/// Enters `data` (four `u64`s) on device 0.
fn enter(rt: &Runtime, data: &[u64; 4]) -> usize {
    let at = data.as_ptr() as usize;
    rt.data_directive(Loc::NONE, 0, &mut Arrays::new(&[(at, 32, mt::TO)]).args(), crate::data::Directive::Begin, false);
    at
}

/// Places a region over `args` while another one runs on the default device: it leaves for
/// a device less busy, its entered data along.
fn placed_away<'s>(rt: &Runtime, spread: &'s Spread, args: &MapArgs) -> Placement<'s> {
    let _busy_home = spread.occupy(rt.device(0).unwrap());
    let p = rt.place(spread, Loc::NONE, region(), args).expect("placed");
    assert_ne!(p.device.id, 0, "{:?}", spread.in_flight());
    p
}

#[test]
fn entered_data_goes_along_only_to_leave_a_busier_device() {
    let rt = runtime(false);
    let spread = rt.spread.as_deref().expect("spreading is on");
    let data = [5u64; 4];
    let at = enter(&rt, &data);
    let mut region_args = Arrays::new(&[(at, 32, TOFROM)]);
    let args = region_args.args();
    for _ in 0..4 {
        // Nothing else in flight: every device is as busy as the default one.
        let p = rt.place(spread, Loc::NONE, region(), &args).expect("placed");
        assert_eq!((p.device.id, p.home.is_some()), (0, false));
        assert!(spread.trips.lock().is_empty());
    }
    let away = placed_away(&rt, spread, &args);
    assert_eq!(away.need.take, [(at, 32)]);
}

#[test]
fn data_entered_on_the_default_device_goes_along_and_comes_home() {
    let (rt, runs) = counting_runtime(false);
    let data = [5u64; 4];
    let at = enter(&rt, &data);
    // Another region runs on the default device meanwhile.
    let spread = rt.spread.as_deref().expect("spreading is on");
    let busy_home = spread.occupy(rt.device(0).unwrap());
    for _ in 0..6 {
        let mut region_args = Arrays::new(&[(at, 32, TOFROM)]);
        let mut nowait = launch(&mut region_args);
        nowait.nowait = true;
        assert_eq!(rt.target_kernel(Loc::NONE, -1, region(), &mut nowait), OFFLOAD_SUCCESS);
        // SAFETY: `data` is live; a volatile read, as the compiler cannot see the runtime.
        assert_eq!(unsafe { std::ptr::read_volatile(&data) }, [5; 4], "the host copy is not touched");
        for id in 1..3 {
            assert_eq!(rt.device(id).unwrap().lock_table().iter().count(), 0, "device {id} let the data go");
        }
    }
    drop(busy_home);
    assert!(spread.trips.lock().is_empty());
    assert!(!rt.device(0).unwrap().lock_table().is_busy(at, 32), "home is not waiting for it");
    let ran: Vec<u64> = runs.iter().map(|r| r.load(Ordering::Relaxed)).collect();
    assert_eq!(ran.iter().sum::<u64>(), 6, "{ran:?}");
    assert_eq!(ran[0], 0, "each left the busier default device ({ran:?})");
    assert!(ran[1] > 0 && ran[2] > 0, "equally loaded devices take turns ({ran:?})");
    let mut exit = Arrays::new(&[(at, 32, mt::FROM)]);
    rt.data_directive(Loc::NONE, 0, &mut exit.args(), Directive::End, false);
    // SAFETY: `data` is live and was written by the runtime's copy back.
    let back = unsafe { std::ptr::read_volatile(&data) };
    assert_eq!(back, [11; 4], "six regions, wherever they ran, each added one at home");
}

#[test]
fn regions_follow_data_that_is_away_until_the_last_of_them_ends() {
    let (rt, runs) = counting_runtime(false);
    let spread = rt.spread.as_deref().expect("spreading is on");
    let data = [5u64; 4];
    let at = enter(&rt, &data);
    let home = rt.device(0).unwrap();
    let mut region_args = Arrays::new(&[(at, 32, TOFROM)]);
    let args = region_args.args();
    let first = placed_away(&rt, spread, &args);
    assert_eq!(first.need.take, [(at, 32)]);
    assert!(home.lock_table().is_busy(at, 32), "away: constructs at home wait for it");
    assert!(rt.send_trips(spread, &home, &first.device, &first.need).is_ok());
    // Whatever is least loaded, the next regions go where the data is.
    let others: Vec<_> = (0..3).map(|_| rt.place(spread, Loc::NONE, region(), &args).expect("placed")).collect();
    for p in &others {
        assert_eq!((p.device.id, &p.need.follow[..]), (first.device.id, &[at][..]), "{:?}", spread.in_flight());
    }
    assert_eq!(spread.trips.lock()[&(0, at)].users, 4);
    // A region runs there: its kernel adds one to the copy that went along.
    let mut run_args = Arrays::new(&[(at, 32, TOFROM)]);
    let tgt = rt.target_kernel(Loc::NONE, first.device.id.into(), region(), &mut launch(&mut run_args));
    assert_eq!(tgt, OFFLOAD_SUCCESS);
    std::thread::scope(|scope| {
        // Exit data at home waits while the data is away, and then copies home's bytes.
        let exiting = scope.spawn(|| {
            let mut exit = Arrays::new(&[(at, 32, mt::FROM)]);
            rt.data_directive(Loc::NONE, 0, &mut exit.args(), Directive::End, false);
        });
        std::thread::sleep(std::time::Duration::from_millis(100));
        for p in others.iter().chain([&first]) {
            assert!(!exiting.is_finished(), "exit data waits until the last user ends");
            assert!(home.lock_table().is_busy(at, 32));
            assert!(rt.end_trips(spread, &home, &p.device, &p.need).is_ok());
        }
        exiting.join().expect("exit data ends");
    });
    assert!(spread.trips.lock().is_empty() && home.lock_table().is_empty());
    assert_eq!(first.device.lock_table().iter().count(), 0, "the trip let the data go there");
    assert_eq!(runs[first.device.id as usize].load(Ordering::Relaxed), 1);
    // SAFETY: `data` is live and was written by the runtime's copy back.
    assert_eq!(unsafe { std::ptr::read_volatile(&data) }, [6; 4], "what the region wrote there came home");
}

#[test]
fn data_the_program_can_reach_another_way_or_that_is_in_use_stays_home() {
    let rt = runtime(false);
    let spread = rt.spread.as_deref().expect("spreading is on");
    let home = rt.device(0).unwrap();
    // Entered twice: something else holds it.
    let twice = [1u64; 4];
    let at = enter(&rt, &twice);
    enter(&rt, &twice);
    let mut a = Arrays::new(&[(at, 32, TOFROM)]);
    assert_eq!(rt.movable(spread, &home, &a.args()), Err(Stay::Present(0)));
    // Its device address was handed to the program.
    let handed = [2u64; 4];
    let at = enter(&rt, &handed);
    let mut a = Arrays::new(&[(at, 32, TOFROM)]);
    assert_eq!(rt.movable(spread, &home, &a.args()).map(|n| n.take), Ok(vec![(at, 32)]));
    assert_ne!(rt.mapped_ptr(at + 8, 0).expect("mapped"), 0);
    assert_eq!(rt.movable(spread, &home, &a.args()), Err(Stay::Present(0)));
    // A pointer of another mapping attached to it: a kernel may reach it through that one.
    let target = [4u64; 4];
    let holder = [target.as_ptr() as usize];
    enter(&rt, &[0; 4]); // (an unrelated mapping, so the holder's is not the only one)
    let holder_at = holder.as_ptr() as usize;
    rt.data_directive(Loc::NONE, 0, &mut Arrays::new(&[(holder_at, 8, mt::TO)]).args(), Directive::Begin, false);
    let mut attach = Arrays::new(&[(target.as_ptr() as usize, 32, mt::TO | mt::PTR_AND_OBJ)]);
    attach.bases[0] = holder_at;
    rt.data_directive(Loc::NONE, 0, &mut attach.args(), Directive::Begin, false);
    assert_eq!(home.lock_table().get(holder_at).map(|e| e.shadows.len()), Some(1), "attached");
    let mut a = Arrays::new(&[(target.as_ptr() as usize, 32, TOFROM)]);
    assert_eq!(rt.movable(spread, &home, &a.args()), Err(Stay::Present(0)));
    // A part of a quiet mapping takes all of it along.
    let whole = [3u64; 8];
    let at = whole.as_ptr() as usize;
    rt.data_directive(Loc::NONE, 0, &mut Arrays::new(&[(at, 64, mt::TO)]).args(), Directive::Begin, false);
    let mut part = Arrays::new(&[(at + 32, 16, TOFROM)]);
    assert_eq!(rt.movable(spread, &home, &part.args()).map(|n| n.take), Ok(vec![(at, 64)]));
    // A member (its pointer would need translating) keeps the region home.
    let mut member = Arrays::new(&[(at, 8, TOFROM | mt::PTR_AND_OBJ)]);
    assert_eq!(rt.movable(spread, &home, &member.args()), Err(Stay::Present(0)));
}

#[test]
fn a_region_whose_data_cannot_go_to_its_device_runs_at_home() {
    let (rt, runs) = counting_runtime(false);
    let spread = rt.spread.as_deref().expect("spreading is on");
    let data = [5u64; 4];
    let at = enter(&rt, &data);
    let home = rt.device(0).unwrap();
    let mut region_args = Arrays::new(&[(at, 32, TOFROM)]);
    let placed = {
        let args = region_args.args();
        let p = placed_away(&rt, spread, &args);
        rt.ensure_loaded(&p.device).expect("the image loads");
        p
    };
    last_mocks()[placed.device.id as usize].0.lose("unplugged");
    let rc = rt.target_carried(Loc::NONE, region(), &mut launch(&mut region_args), &placed, &home);
    assert_eq!(rc, OFFLOAD_SUCCESS);
    let ran: Vec<u64> = runs.iter().map(|r| r.load(Ordering::Relaxed)).collect();
    assert_eq!(ran, [1, 0, 0], "the region ran at home");
    assert!(spread.trips.lock().is_empty() && !home.lock_table().is_busy(at, 32));
    assert_eq!(home.lock_table().iter().next().map(|e| e.dyn_rc), Some(1));
    let mut exit = Arrays::new(&[(at, 32, mt::FROM)]);
    rt.data_directive(Loc::NONE, 0, &mut exit.args(), Directive::End, false);
    // SAFETY: `data` is live and was written by the runtime's copy back.
    assert_eq!(unsafe { std::ptr::read_volatile(&data) }, [6; 4]);
}

#[test]
fn data_away_on_a_device_that_is_lost_comes_home_as_it_left() {
    let rt = runtime(false);
    let spread = rt.spread.as_deref().expect("spreading is on");
    let data = [5u64; 4];
    let at = enter(&rt, &data);
    let home = rt.device(0).unwrap();
    let mut region_args = Arrays::new(&[(at, 32, TOFROM)]);
    let args = region_args.args();
    let away = placed_away(&rt, spread, &args);
    assert!(rt.send_trips(spread, &home, &away.device, &away.need).is_ok());
    let mut run_args = Arrays::new(&[(at, 32, TOFROM)]);
    let tgt = rt.target_kernel(Loc::NONE, away.device.id.into(), region(), &mut launch(&mut run_args));
    assert_eq!(tgt, OFFLOAD_SUCCESS, "the region ran there");
    away.device.mark_unusable("unplugged");
    // Its failure was said where it was met: the trip's end says nothing more.
    assert!(rt.end_trips(spread, &home, &away.device, &away.need).is_ok());
    assert!(spread.trips.lock().is_empty() && !home.lock_table().is_busy(at, 32));
    let mut exit = Arrays::new(&[(at, 32, mt::FROM)]);
    rt.data_directive(Loc::NONE, 0, &mut exit.args(), Directive::End, false);
    // SAFETY: `data` is live and was written by the runtime's copy back.
    assert_eq!(unsafe { std::ptr::read_volatile(&data) }, [5; 4], "home holds what it held before the trip");
}
