// Package kit is what the workload controllers (ReplicaSet, Deployment,
// DaemonSet, StatefulSet, Job) and the controllers that read pods share
// beside their worker loop, as kube-controller-manager's
// controller_utils.go and controller_ref_manager.go are upstream:
// expectations of a controller's own writes, the claiming of objects by
// selector and controller reference (adoption of orphans, release of
// what no longer matches, finding the owner of an object and the owners
// that may adopt it), and pod readiness and availability.
//
// It writes only the ownerReferences (and the finalizers a caller names)
// of the objects a caller asks it to claim, through the caller's client.
// It must hold no informer, queue or goroutine of its own, and must not
// know any one kind of controller: what to create, delete or report is
// each controller's.
package kit
