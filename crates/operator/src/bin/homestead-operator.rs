//! `homestead-operator`: the operator alone, as the chart's operator Pods run it; see the
//! library's documentation.

fn main() -> anyhow::Result<std::process::ExitCode> {
    homestead::operator()
}
