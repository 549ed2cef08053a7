package dra_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	"k8s.io/utils/ptr"

	"bonsai.dev/bonsai/apiserver/authn"
	"bonsai.dev/bonsai/kubelet"
	"bonsai.dev/bonsai/kubelet/dra"
	"bonsai.dev/bonsai/testsupport/clustertest"
)

const driverName = "test.bonsai.dev"

// testDriver is a DRA driver's kubelet plugin on real gRPC servers: the
// registration service on a socket in the registry directory and the DRA
// service on its own socket. It records the calls it gets.
type testDriver struct {
	drapb.UnimplementedDRAPluginServer
	registerapi.UnimplementedRegistrationServer
	typ, name string
	endpoint  string
	regSock   string
	servers   []*grpc.Server

	mu         sync.Mutex
	prepared   []string // claim names, per call
	unprepared []string
	registered []*registerapi.RegistrationStatus
	failWith   string // per-claim error of NodePrepareResources
}

func startDriver(t *testing.T, registry, typ string) *testDriver {
	t.Helper()
	d := &testDriver{typ: typ, name: driverName,
		endpoint: filepath.Join(t.TempDir(), "dra.sock"), regSock: filepath.Join(registry, driverName+"-reg.sock")}
	serve := func(path string, reg func(*grpc.Server)) {
		l, err := net.Listen("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		s := grpc.NewServer()
		reg(s)
		go s.Serve(l)
		d.servers = append(d.servers, s)
	}
	serve(d.endpoint, func(s *grpc.Server) { drapb.RegisterDRAPluginServer(s, d) })
	serve(d.regSock, func(s *grpc.Server) { registerapi.RegisterRegistrationServer(s, d) })
	t.Cleanup(d.stop)
	return d
}

// stop ends both servers and removes the sockets, as a driver going away.
func (d *testDriver) stop() {
	for _, s := range d.servers {
		s.Stop()
	}
	d.servers = nil
	os.Remove(d.regSock)
	os.Remove(d.endpoint)
}

func (d *testDriver) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return &registerapi.PluginInfo{Type: d.typ, Name: d.name, Endpoint: d.endpoint, SupportedVersions: []string{drapb.DRAPluginService}}, nil
}

func (d *testDriver) NotifyRegistrationStatus(_ context.Context, s *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.registered = append(d.registered, s)
	return &registerapi.RegistrationStatusResponse{}, nil
}

func (d *testDriver) NodePrepareResources(_ context.Context, req *drapb.NodePrepareResourcesRequest) (*drapb.NodePrepareResourcesResponse, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	resp := &drapb.NodePrepareResourcesResponse{Claims: map[string]*drapb.NodePrepareResourceResponse{}}
	for _, c := range req.Claims {
		d.prepared = append(d.prepared, c.Name)
		if d.failWith != "" {
			resp.Claims[c.Uid] = &drapb.NodePrepareResourceResponse{Error: d.failWith}
			continue
		}
		resp.Claims[c.Uid] = &drapb.NodePrepareResourceResponse{Devices: []*drapb.Device{
			{RequestNames: []string{"dev"}, PoolName: "node", DeviceName: "dev0", CdiDeviceIds: []string{"bonsai.test/dra=" + c.Uid + "-dev0"}},
			{RequestNames: []string{"other"}, PoolName: "node", DeviceName: "dev1", CdiDeviceIds: []string{"bonsai.test/dra=" + c.Uid + "-dev1"}},
		}}
	}
	return resp, nil
}

func (d *testDriver) NodeUnprepareResources(_ context.Context, req *drapb.NodeUnprepareResourcesRequest) (*drapb.NodeUnprepareResourcesResponse, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	resp := &drapb.NodeUnprepareResourcesResponse{Claims: map[string]*drapb.NodeUnprepareResourceResponse{}}
	for _, c := range req.Claims {
		d.unprepared = append(d.unprepared, c.Name)
		resp.Claims[c.Uid] = &drapb.NodeUnprepareResourceResponse{}
	}
	return resp, nil
}

func (d *testDriver) calls() (prepared, unprepared []string, registered []*registerapi.RegistrationStatus) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.prepared), slices.Clone(d.unprepared), slices.Clone(d.registered)
}

// env is the API server, a node's kubelet root and its DRA manager.
type env struct {
	*clustertest.Env
	root   string
	get    dra.ClaimGetter
	cancel context.CancelFunc
	m      *dra.Manager
}

func newEnv(t *testing.T) *env {
	e := &env{Env: clustertest.New(t, clustertest.Options{}), root: t.TempDir()}
	// The manager reads claims as the node does (apiserver's tests
	// check what the Node authorizer lets it read).
	get, err := kubelet.ClaimGetter(e.ConfigFor(&authn.User{Name: "system:node:node-a", Groups: []string{"system:nodes", authn.GroupAuthenticated}}))
	if err != nil {
		t.Fatal(err)
	}
	e.get = get
	e.start(t)
	return e
}

// start runs a manager on the root (again, as bonsai restarting).
func (e *env) start(t *testing.T) {
	t.Helper()
	if e.cancel != nil {
		e.cancel()
	}
	ctx, cancel := context.WithCancel(e.Ctx)
	t.Cleanup(cancel)
	e.cancel = cancel
	e.m = dra.New(dra.Config{RootDir: e.root, GetClaim: e.get, Logger: e.Log})
	if err := e.m.Start(ctx); err != nil {
		t.Fatal(err)
	}
}

func (e *env) waitDrivers(t *testing.T, want ...string) {
	t.Helper()
	clustertest.Eventually(t, 5*time.Second, func() error {
		if got := e.m.Drivers(); !slices.Equal(got, want) {
			return errors.New("drivers " + strings.Join(got, ","))
		}
		return nil
	})
}

// claimPod makes a pod on node-a with a claim allocated by driverName
// and reserved for it, as the scheduler leaves them.
func (e *env) claimPod(t *testing.T, name string) *corev1.Pod {
	t.Helper()
	claim, err := e.Client.Resource.ResourceClaims("default").Create(e.Ctx, &resourcev1.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-claim"},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{
			{Name: "dev", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "test"}},
			{Name: "other", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "test"}}}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := e.Client.Core.Pods("default").Create(e.Ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{
		NodeName:       "node-a",
		ResourceClaims: []corev1.PodResourceClaim{{Name: "my", ResourceClaimName: ptr.To(claim.Name)}},
		Containers: []corev1.Container{
			{Name: "all", Image: "busybox", Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "my"}}}},
			{Name: "one", Image: "busybox", Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "my", Request: "other"}}}},
			{Name: "none", Image: "busybox"},
		},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	claim.Status.Allocation = &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{Results: []resourcev1.DeviceRequestAllocationResult{
		{Request: "dev", Driver: driverName, Pool: "node", Device: "dev0"},
		{Request: "other", Driver: driverName, Pool: "node", Device: "dev1"}}}}
	claim.Status.ReservedFor = []resourcev1.ResourceClaimConsumerReference{{Resource: "pods", Name: p.Name, UID: p.UID}}
	if _, err := e.Client.Resource.ResourceClaims("default").UpdateStatus(e.Ctx, claim, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	return p
}

func cdi(m *dra.Manager, p *corev1.Pod, c int) []string {
	return m.CDIDevices(p, &p.Spec.Containers[c])
}

// A driver registers through the registry directory; a pod's claim is
// prepared once (again for the same pod, or after bonsai restarts, the
// checkpoint answers), each container gets the CDI devices of what it
// names, and the claim is unprepared once the pod is done.
func TestPrepareCheckpointUnprepare(t *testing.T) {
	e := newEnv(t)
	d := startDriver(t, e.m.RegistryDir(), registerapi.DRAPlugin)
	e.waitDrivers(t, driverName)
	if _, _, reg := d.calls(); len(reg) != 1 || !reg[0].PluginRegistered {
		t.Fatalf("registration status the driver was told: %v", reg)
	}
	p := e.claimPod(t, "a")
	for range 2 {
		if err := e.m.Prepare(e.Ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	uid := func() string {
		c, _ := e.Client.Resource.ResourceClaims("default").Get(e.Ctx, "a-claim", metav1.GetOptions{})
		return string(c.UID)
	}()
	all := []string{"bonsai.test/dra=" + uid + "-dev0", "bonsai.test/dra=" + uid + "-dev1"}
	if got := cdi(e.m, p, 0); !slices.Equal(got, all) {
		t.Errorf("container naming the claim: CDI devices %v, want %v", got, all)
	}
	if got := cdi(e.m, p, 1); !slices.Equal(got, all[1:]) {
		t.Errorf("container naming request other: CDI devices %v, want %v", got, all[1:])
	}
	if got := cdi(e.m, p, 2); len(got) != 0 {
		t.Errorf("container naming no claim: CDI devices %v", got)
	}

	// bonsai restarts: the driver registers again (its socket is still
	// there), the claim is not prepared again and the devices are known.
	e.start(t)
	e.waitDrivers(t, driverName)
	if err := e.m.Prepare(e.Ctx, p); err != nil {
		t.Fatal(err)
	}
	if got := cdi(e.m, p, 0); !slices.Equal(got, all) {
		t.Errorf("after restart: CDI devices %v, want %v", got, all)
	}
	if prep, unprep, reg := d.calls(); !slices.Equal(prep, []string{"a-claim"}) || len(unprep) != 0 || len(reg) != 2 {
		t.Fatalf("driver calls: prepared %v, unprepared %v, registrations %d; want one prepare, two registrations", prep, unprep, len(reg))
	}
	if got := e.m.Pods(); !slices.Equal(got, []types.UID{p.UID}) {
		t.Errorf("checkpointed pods %v", got)
	}

	// The pod is done: unprepared once, gone from the checkpoint.
	for range 2 {
		if err := e.m.Unprepare(e.Ctx, p.UID); err != nil {
			t.Fatal(err)
		}
	}
	if _, unprep, _ := d.calls(); !slices.Equal(unprep, []string{"a-claim"}) {
		t.Fatalf("unprepared %v, want a-claim once", unprep)
	}
	b, err := os.ReadFile(filepath.Join(e.root, dra.StateFileName))
	if err != nil || strings.Contains(string(b), uid) {
		t.Fatalf("checkpoint after unprepare: %s %v", b, err)
	}
	// A pod bonsai no longer runs (deleted while it was down) is
	// unprepared by Retain.
	q := e.claimPod(t, "b")
	if err := e.m.Prepare(e.Ctx, q); err != nil {
		t.Fatal(err)
	}
	if err := e.m.Retain(e.Ctx, func(uid types.UID) bool { return uid != q.UID }); err != nil {
		t.Fatal(err)
	}
	if _, unprep, _ := d.calls(); !slices.Equal(unprep, []string{"a-claim", "b-claim"}) || len(e.m.Pods()) != 0 {
		t.Fatalf("after Retain: unprepared %v, pods %v", unprep, e.m.Pods())
	}
}

// Errors: a claim of an unregistered driver, a driver's prepare error,
// a plugin of another type; each is retried, none is remembered as done.
func TestPrepareErrors(t *testing.T) {
	e := newEnv(t)
	p := e.claimPod(t, "a")
	if err := e.m.Prepare(e.Ctx, p); err == nil || !strings.Contains(err.Error(), "DRA driver "+driverName+" is not registered") {
		t.Fatalf("prepare with no driver: %v", err)
	}

	// A plugin of another type is refused and told why.
	csi := startDriver(t, e.m.RegistryDir(), registerapi.CSIPlugin)
	clustertest.Eventually(t, 5*time.Second, func() error {
		if _, _, reg := csi.calls(); len(reg) != 1 || reg[0].PluginRegistered || !strings.Contains(reg[0].Error, "not supported") {
			return errors.New("not refused yet")
		}
		return nil
	})
	if got := e.m.Drivers(); len(got) != 0 {
		t.Fatalf("a CSI plugin registered as DRA driver: %v", got)
	}
	csi.stop()

	d := startDriver(t, e.m.RegistryDir(), registerapi.DRAPlugin)
	e.waitDrivers(t, driverName)
	d.mu.Lock()
	d.failWith = "device dev0 is busy"
	d.mu.Unlock()
	if err := e.m.Prepare(e.Ctx, p); err == nil || !strings.Contains(err.Error(), "device dev0 is busy") {
		t.Fatalf("prepare error: %v", err)
	}
	if got := cdi(e.m, p, 0); len(got) != 0 {
		t.Fatalf("CDI devices of a claim not prepared: %v", got)
	}
	d.mu.Lock()
	d.failWith = ""
	d.mu.Unlock()
	if err := e.m.Prepare(e.Ctx, p); err != nil {
		t.Fatal(err)
	}
	if prep, _, _ := d.calls(); !slices.Equal(prep, []string{"a-claim", "a-claim"}) {
		t.Fatalf("prepare calls %v: want the failed one and its retry", prep)
	}
	if len(cdi(e.m, p, 0)) != 2 {
		t.Fatalf("CDI devices after the retry: %v", cdi(e.m, p, 0))
	}

	// The driver goes away (its socket removed): it is deregistered, and
	// unprepare waits for it, keeping the claim.
	d.stop()
	e.waitDrivers(t)
	if err := e.m.Unprepare(e.Ctx, p.UID); err == nil || !strings.Contains(err.Error(), "not registered") {
		t.Fatalf("unprepare without the driver: %v", err)
	}
	d2 := startDriver(t, e.m.RegistryDir(), registerapi.DRAPlugin)
	e.waitDrivers(t, driverName)
	if err := e.m.Retain(e.Ctx, func(types.UID) bool { return true }); err != nil {
		t.Fatal(err)
	}
	if _, unprep, _ := d2.calls(); !slices.Equal(unprep, []string{"a-claim"}) {
		t.Fatalf("the driver back: unprepared %v", unprep)
	}

	// A pod whose claim is reserved for another pod is not prepared.
	q := e.claimPod(t, "q")
	q.UID = "someone-else"
	if err := e.m.Prepare(e.Ctx, q); err == nil || !strings.Contains(err.Error(), "not reserved for pod") {
		t.Fatalf("prepare of a claim not reserved for the pod: %v", err)
	}
}
