//! Prints the `users`, `profiles` and `directorygroups.homestead.dev` CustomResourceDefinitions
//! as YAML; `just generate` writes it to `manifests/crd.yaml`.

fn main() {
    print!("{}", homestead_api::crd_yaml());
}
