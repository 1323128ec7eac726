//! Prints the `users.homestead.dev` CustomResourceDefinition as YAML; `just generate` writes it
//! to `manifests/crd.yaml`.

fn main() {
    print!("{}", homestead_api::crd_yaml());
}
