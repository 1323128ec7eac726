//! `homestead`: every command of Homestead (the operator when given none); see the library's
//! documentation.

fn main() -> anyhow::Result<std::process::ExitCode> {
    homestead::homestead()
}
