// Package testsupport is the one home of what bonsai's tests share, so that
// the tests of every component reach it without importing e2e/. It holds no
// code itself; its packages are:
//
//   - testenv: the real programs tests and the bench run against (etcd, a
//     registry, logind, the test webhook, kubectl, the official Python
//     and JavaScript clients, the busybox image, tmpfs mounts, the
//     overload flood) and Require, which makes a missing
//     prerequisite a skip on a developer's machine and a failure under
//     CI=true. Of bonsai it imports only apiserver/pki.
//   - clustertest: the in-process cluster harness, a real API server over
//     badger with, on request, the scheduler, simulated nodes and the
//     storage controllers.
//
// They cannot be one package: clustertest imports apiserver, and
// apiserver's internal tests import testenv, which would be an import
// cycle. Helpers bound to one package stay beside it, as net/http/httptest
// does: kubelet/containerd/ctdtest starts a containerd of a test's own. Only
// tests, test helpers and the bench command (e2e/bench) import these
// packages; bonsai's own packages must not.
package testsupport
