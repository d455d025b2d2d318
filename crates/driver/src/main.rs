fn main() {
    eprintln!("ompcc: not built yet");
    std::process::exit(1);
}
