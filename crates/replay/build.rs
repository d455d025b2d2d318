// omp-replay exports its `__kmpc_push_num_*` (src/shape.rs) so that the replayed image binds
// to them before libomp's: an executable's exported symbols come first in the global scope.
fn main() {
    for sym in ["__kmpc_push_num_teams", "__kmpc_push_num_teams_51", "__kmpc_push_num_threads"] {
        println!("cargo:rustc-link-arg-bin=omp-replay=-Wl,--export-dynamic-symbol={sym}");
    }
}
