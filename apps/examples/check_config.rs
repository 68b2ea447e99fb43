//! Validates `cores.json` files: `cargo run -p rpcrdma-apps --example
//! check_config -- configs/*.json`. Prints every problem with its JSON path;
//! exits with status 1 if any file is invalid.

fn main() {
    let mut bad = false;
    for path in std::env::args().skip(1) {
        match rpcrdma_apps::config::Config::load(&path) {
            Ok(c) => println!(
                "{path}: ok ({} cores, {} pools, {} backends, {} exports)",
                c.cores.len(),
                c.pools.len(),
                c.backends.len(),
                c.exports.len()
            ),
            Err(e) => {
                bad = true;
                println!("{path}: {e}");
            }
        }
    }
    if bad {
        std::process::exit(1);
    }
}
