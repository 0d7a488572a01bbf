fn main() {
    std::process::exit(ken::cli::main());
}
