//! The deployment files of `deploy/` (issue 24, item 7) stay valid: the Kubernetes manifests
//! against the Kubernetes API's schemas, with `kubernetes-validate` (PyPI; `scripts/test.sh`
//! installs it), strictly (an unknown field is an error); and the compose file as
//! `docker-compose config` reads it. The containers themselves run in `cluster_docker`.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// The repository's `deploy/` folder.
fn deploy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy")
}

/// Runs `kubernetes-validate --strict --quiet FILES`; fails the test naming the way to get
/// the validator when it is missing.
fn validate(files: &[PathBuf]) -> Output {
    Command::new("kubernetes-validate")
        .args(["--strict", "--quiet"])
        .args(files)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run kubernetes-validate ({e}): pip install kubernetes-validate \
                 (scripts/test.sh does)"
            )
        })
}

/// The manifests of `deploy/kubernetes/`, sorted.
fn manifests() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(deploy().join("kubernetes"))
        .expect("deploy/kubernetes exists")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    files
}

#[test]
fn kubernetes_manifests_validate_against_the_api_schemas() {
    let files = manifests();
    let names: Vec<String> = files
        .iter()
        .map(|f| f.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        ["coordinator.yaml", "secret.yaml", "workers.yaml"],
        "the manifests this test and README.md describe"
    );
    let o = validate(&files);
    assert!(
        o.status.success(),
        "the manifests do not validate:\n{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    // Every container of the coordinator and the workers is probed, both ways.
    for name in ["coordinator.yaml", "workers.yaml"] {
        let text = fs::read_to_string(deploy().join("kubernetes").join(name)).unwrap();
        assert_eq!(text.matches(" image: ").count(), 1, "{name}: one container");
        for probe in ["livenessProbe:", "readinessProbe:"] {
            assert_eq!(text.matches(probe).count(), 1, "{name}: {probe}");
        }
    }
}

/// A manifest's text without its comments and without the lines marked `# tls` (the TLS
/// variant's own) or `# plaintext` (the plain manifests' own: the `grpc:` probes, which
/// speak plaintext, where the TLS variant keeps TCP checks).
fn without_tls(text: &str) -> String {
    text.lines()
        .filter(|l| {
            !l.trim_start().starts_with('#') && !l.ends_with("# tls") && !l.ends_with("# plaintext")
        })
        .map(|l| format!("{l}\n"))
        .collect()
}

#[test]
fn the_tls_variant_validates_and_differs_from_the_manifests_only_by_its_tls_lines() {
    let tls = deploy().join("kubernetes/tls");
    let files: Vec<PathBuf> = ["coordinator.yaml", "secret-tls.yaml", "workers.yaml"]
        .iter()
        .map(|f| tls.join(f))
        .collect();
    let o = validate(&files);
    assert!(
        o.status.success(),
        "the TLS manifests do not validate:\n{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    // The same cluster as the plain manifests, plus the TLS flags, the Secret's mount and
    // its volume (so the two cannot drift apart).
    for name in ["coordinator.yaml", "workers.yaml"] {
        let plain = fs::read_to_string(deploy().join("kubernetes").join(name)).unwrap();
        let variant = fs::read_to_string(tls.join(name)).unwrap();
        assert_eq!(without_tls(&variant), without_tls(&plain), "{name}");
        for line in [
            "- --tls-cert  # tls",
            "- --tls-key  # tls",
            "- --tls-ca  # tls",
            "- --tls-server-name  # tls",
            "secretName: weir-tls  # tls",
            "mountPath: /etc/weir-tls  # tls",
        ] {
            assert_eq!(variant.matches(line).count(), 1, "{name}: {line}");
        }
    }
    // A worker's exchange accepts on loopback too, where the TLS variant's readiness probe
    // (a command, which cannot name the pod's IP) runs `weir health` over TLS.
    for workers in [deploy().join("kubernetes"), tls.clone()] {
        let text = fs::read_to_string(workers.join("workers.yaml")).unwrap();
        assert!(
            text.contains("- --bind-host\n            - 0.0.0.0\n"),
            "{text}"
        );
    }
    let probe = fs::read_to_string(tls.join("workers.yaml")).unwrap();
    let exec =
        "command: [/usr/local/bin/weir, health, \"127.0.0.1:6124\", --timeout, 3s, --tls-cert";
    assert_eq!(probe.matches(exec).count(), 1, "{probe}");
    let secret = fs::read_to_string(tls.join("secret-tls.yaml")).unwrap();
    for key in ["ca.crt:", "tls.crt:", "tls.key:"] {
        assert!(secret.contains(key), "secret-tls.yaml: {key}");
    }
}

#[test]
fn the_validator_refuses_a_broken_manifest() {
    // The check above can fail: a port that is not a number and an unknown field are
    // refused, naming them.
    let tmp = tempfile::tempdir().unwrap();
    let workers = fs::read_to_string(deploy().join("kubernetes/workers.yaml")).unwrap();
    for (from, to, named) in [
        ("containerPort: 6124", "containerPort: \"x6124\"", "x6124"),
        (
            "serviceName: weir-worker",
            "serviceNam: weir-worker",
            "serviceNam",
        ),
    ] {
        assert!(workers.contains(from), "{from}");
        let broken = tmp.path().join("workers.yaml");
        fs::write(&broken, workers.replacen(from, to, 1)).unwrap();
        let o = validate(&[broken]);
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(!o.status.success(), "{to} passed:\n{said}");
        assert!(said.contains(named), "{said}");
    }
}

#[test]
fn the_compose_file_reads_with_a_coordinator_three_workers_and_s3() {
    if std::env::var("WEIR_SKIP_DOCKER_TESTS").is_ok_and(|v| v == "1") {
        eprintln!("skipped: WEIR_SKIP_DOCKER_TESTS=1");
        return;
    }
    let o = Command::new("docker-compose")
        .args(["-f"])
        .arg(deploy().join("compose.yaml"))
        .args(["config", "--services"])
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run docker-compose ({e}): apt-get install docker-compose, or set \
                 WEIR_SKIP_DOCKER_TESTS=1 to skip the tests that need Docker"
            )
        });
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut services: Vec<String> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(String::from)
        .collect();
    services.sort();
    assert_eq!(
        services,
        ["coordinator", "s3", "worker-1", "worker-2", "worker-3"]
    );
}
