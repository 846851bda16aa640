//! Runs the loom models of the wait engine and the slot table
//! (`semaphore_core::loom_models`): `scripts/loom` builds this with
//! `--cfg semaphore_loom` and runs each model, then each again with the
//! planted bug it must catch (`SEMAPHORE_LOOM_MUTANT`).
//!
//! ```sh
//! scripts/loom                # every model, and every planted bug caught
//! semaphore-loom hand_off     # one model (in a loom build)
//! ```

#[cfg(semaphore_loom)]
fn main() {
    use semaphore_core::loom_models::MODELS;
    let wanted: Vec<String> = std::env::args().skip(1).collect();
    if wanted.iter().any(|w| w == "--list") {
        for (name, _, mutant) in MODELS {
            println!("{name} {mutant}");
        }
        return;
    }
    for (name, model, _) in MODELS {
        if wanted.is_empty() || wanted.iter().any(|w| w == name) {
            println!("model {name}");
            model();
        }
    }
}

#[cfg(not(semaphore_loom))]
fn main() {
    eprintln!("semaphore-loom: built without --cfg semaphore_loom, so no models; run scripts/loom");
    std::process::exit(64);
}
