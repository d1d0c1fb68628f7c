fn main() {
    std::process::exit(cellar::cli::main());
}
