//! Prints the `users.homestead.dev` and `profiles.homestead.dev` CustomResourceDefinitions as
//! YAML; `just generate` writes it
//! to `manifests/crd.yaml`.

fn main() {
    print!("{}", homestead_api::crd_yaml());
}
