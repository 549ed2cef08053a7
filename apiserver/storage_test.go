package apiserver

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// wantInvalid fails unless err is a 422 whose message holds each of want.
func wantInvalid(t *testing.T, what string, err error, want ...string) {
	t.Helper()
	if !apierrors.IsInvalid(err) {
		t.Fatalf("%s: want 422 Invalid, got %v", what, err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%s: %q lacks %q", what, err.Error(), w)
		}
	}
}

// The CSI kinds of storage.k8s.io/v1 as kube-apiserver serves them:
// defaults, validation with its field paths and messages, immutable
// fields, the status subresource and table columns.
func TestStorageCSIKinds(t *testing.T) {
	e := newTestEnv(t)
	st := e.cs.StorageV1()

	t.Run("CSIDriver", func(t *testing.T) {
		d, err := st.CSIDrivers().Create(e.ctx, &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: "csi.example.com"}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		s := d.Spec
		if !*s.AttachRequired || *s.PodInfoOnMount || *s.StorageCapacity || *s.RequiresRepublish || *s.SELinuxMount ||
			*s.FSGroupPolicy != storagev1.ReadWriteOnceWithFSTypeFSGroupPolicy || len(s.VolumeLifecycleModes) != 1 || s.VolumeLifecycleModes[0] != storagev1.VolumeLifecyclePersistent {
			t.Errorf("defaults: %+v", s)
		}
		d.Spec.AttachRequired = ptr.To(false)
		_, err = st.CSIDrivers().Update(e.ctx, d, metav1.UpdateOptions{})
		wantInvalid(t, "attachRequired changed", err, `CSIDriver.storage.k8s.io "csi.example.com" is invalid`, "spec.attachedRequired: Invalid value: false: field is immutable")
		d.Spec.AttachRequired = ptr.To(true)
		d.Spec.PodInfoOnMount = ptr.To(true) // mutable
		if _, err := st.CSIDrivers().Update(e.ctx, d, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("podInfoOnMount change: %v", err)
		}
		bad := &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: "bad.example.com"}, Spec: storagev1.CSIDriverSpec{
			FSGroupPolicy:        ptr.To(storagev1.FSGroupPolicy("Sometimes")),
			TokenRequests:        []storagev1.TokenRequest{{Audience: "a", ExpirationSeconds: ptr.To(int64(60))}, {Audience: "a"}},
			VolumeLifecycleModes: []storagev1.VolumeLifecycleMode{"Forever"},
		}}
		_, err = st.CSIDrivers().Create(e.ctx, bad, metav1.CreateOptions{})
		wantInvalid(t, "bad driver", err, `spec.fsGroupPolicy: Unsupported value: "Sometimes"`,
			"spec.tokenRequests[0].expirationSeconds: Invalid value: 60: may not specify a duration less than 10 minutes",
			`spec.tokenRequests[1].audience: Duplicate value: "a"`, `spec.volumeLifecycleModes: Unsupported value: "Forever"`)
	})

	t.Run("CSINode", func(t *testing.T) {
		n := &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}, Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{
			{Name: "csi.example.com", NodeID: "node-1", TopologyKeys: []string{"topology.example.com/zone"}, Allocatable: &storagev1.VolumeNodeResources{Count: ptr.To(int32(8))}},
		}}}
		n, err := st.CSINodes().Create(e.ctx, n, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n.Spec.Drivers[0].Allocatable.Count = ptr.To(int32(16)) // mutable
		if n, err = st.CSINodes().Update(e.ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("allocatable change: %v", err)
		}
		n.Spec.Drivers[0].NodeID = "elsewhere"
		_, err = st.CSINodes().Update(e.ctx, n, metav1.UpdateOptions{})
		wantInvalid(t, "nodeID changed", err, "spec.drivers: Invalid value", "field is immutable")
		dup := &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: "node-2"}, Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{
			{Name: "csi.example.com", NodeID: strings.Repeat("n", 257)}, {Name: "csi.example.com", NodeID: "x"},
		}}}
		_, err = st.CSINodes().Create(e.ctx, dup, metav1.CreateOptions{})
		wantInvalid(t, "bad node", err, "spec.drivers[0].nodeID: Invalid value", "must be 256 characters or less", `spec.drivers[1].name: Duplicate value: "csi.example.com"`)
		long := &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: "node-3"}, Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{{Name: "csi.example.com", NodeID: strings.Repeat("n", 256)}}}}
		if _, err := st.CSINodes().Create(e.ctx, long, metav1.CreateOptions{}); err != nil {
			t.Errorf("a 256-character node ID: %v", err)
		}
	})

	t.Run("VolumeAttachment", func(t *testing.T) {
		va := &storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: "va-1"}, Spec: storagev1.VolumeAttachmentSpec{
			Attacher: "csi.example.com", NodeName: "node-1", Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: ptr.To("pv-1")},
		}, Status: storagev1.VolumeAttachmentStatus{Attached: true}}
		va, err := st.VolumeAttachments().Create(e.ctx, va, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if va.Status.Attached {
			t.Error("status set on create was kept")
		}
		va.Status.Attached = true
		if va, err = st.VolumeAttachments().UpdateStatus(e.ctx, va, metav1.UpdateOptions{}); err != nil || !va.Status.Attached {
			t.Fatalf("status update: %v %+v", err, va.Status)
		}
		va.Spec.NodeName = "node-2"
		_, err = st.VolumeAttachments().Update(e.ctx, va, metav1.UpdateOptions{})
		wantInvalid(t, "spec changed", err, "spec: Invalid value", "field is immutable")
		for _, c := range []struct {
			src  storagev1.VolumeAttachmentSource
			want string
		}{
			{storagev1.VolumeAttachmentSource{}, "spec.source: Required value: must specify exactly one of inlineVolumeSpec and persistentVolumeName"},
			{storagev1.VolumeAttachmentSource{PersistentVolumeName: ptr.To("pv"), InlineVolumeSpec: &corev1.PersistentVolumeSpec{}}, "spec.source: Forbidden: must specify exactly one of inlineVolumeSpec and persistentVolumeName"},
		} {
			_, err := st.VolumeAttachments().Create(e.ctx, &storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: "va-bad"},
				Spec: storagev1.VolumeAttachmentSpec{Attacher: "csi.example.com", NodeName: "node-1", Source: c.src}}, metav1.CreateOptions{})
			wantInvalid(t, c.want, err, c.want)
		}
		_, err = st.VolumeAttachments().Create(e.ctx, &storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: "va-bad"},
			Spec: storagev1.VolumeAttachmentSpec{Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: ptr.To("pv")}}}, metav1.CreateOptions{})
		wantInvalid(t, "no attacher, no node", err, "spec.attacher: Required value", `spec.nodeName: Invalid value: ""`)
	})

	t.Run("CSIStorageCapacity", func(t *testing.T) {
		q := apiresource.MustParse("10Gi")
		c, err := st.CSIStorageCapacities("default").Create(e.ctx, &storagev1.CSIStorageCapacity{ObjectMeta: metav1.ObjectMeta{Name: "cap-1"},
			StorageClassName: "fast", Capacity: &q}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		c.StorageClassName = "slow"
		_, err = st.CSIStorageCapacities("default").Update(e.ctx, c, metav1.UpdateOptions{})
		wantInvalid(t, "class changed", err, `storageClassName: Invalid value: "slow": field is immutable`)
		neg := apiresource.MustParse("-1Gi")
		_, err = st.CSIStorageCapacities("default").Create(e.ctx, &storagev1.CSIStorageCapacity{ObjectMeta: metav1.ObjectMeta{Name: "cap-2"},
			StorageClassName: "fast", Capacity: &neg}, metav1.CreateOptions{})
		wantInvalid(t, "negative capacity", err, `capacity: Invalid value: "-1Gi": must be greater than or equal to 0`)
	})

	t.Run("classes", func(t *testing.T) {
		vac, err := st.VolumeAttributesClasses().Create(e.ctx, &storagev1.VolumeAttributesClass{ObjectMeta: metav1.ObjectMeta{Name: "gold"},
			DriverName: "csi.example.com", Parameters: map[string]string{"iops": "3000"}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		vac.Parameters["iops"] = "6000"
		_, err = st.VolumeAttributesClasses().Update(e.ctx, vac, metav1.UpdateOptions{})
		wantInvalid(t, "parameters changed", err, "parameters: Forbidden: updates to parameters are forbidden.")
		_, err = st.VolumeAttributesClasses().Create(e.ctx, &storagev1.VolumeAttributesClass{ObjectMeta: metav1.ObjectMeta{Name: "empty"}, DriverName: "csi.example.com"}, metav1.CreateOptions{})
		wantInvalid(t, "no parameters", err, "parameters: Required value: must contain at least one key/value pair")
		_, err = st.StorageClasses().Create(e.ctx, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "none"}}, metav1.CreateOptions{})
		wantInvalid(t, "no provisioner", err, "provisioner: Required value")
		sc, err := st.StorageClasses().Create(e.ctx, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "fast"}, Provisioner: "csi.example.com"}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		sc.Parameters = map[string]string{"type": "ssd"}
		_, err = st.StorageClasses().Update(e.ctx, sc, metav1.UpdateOptions{})
		wantInvalid(t, "class parameters changed", err, "parameters: Forbidden: updates to parameters are forbidden.")
	})

	t.Run("tables", func(t *testing.T) {
		for _, c := range []struct {
			path    string
			headers []string
			row     []any
		}{
			{"/apis/storage.k8s.io/v1/csidrivers/csi.example.com",
				[]string{"NAME", "ATTACHREQUIRED", "PODINFOONMOUNT", "STORAGECAPACITY", "TOKENREQUESTS", "REQUIRESREPUBLISH", "MODES", "AGE"},
				[]any{"csi.example.com", true, true, false, "<unset>", false, "Persistent", recent}},
			{"/apis/storage.k8s.io/v1/csinodes/node-1", []string{"NAME", "DRIVERS", "AGE"}, []any{"node-1", int64(1), recent}},
			{"/apis/storage.k8s.io/v1/volumeattachments/va-1", []string{"NAME", "ATTACHER", "PV", "NODE", "ATTACHED", "AGE"},
				[]any{"va-1", "csi.example.com", "pv-1", "node-1", true, recent}},
			{"/apis/storage.k8s.io/v1/namespaces/default/csistoragecapacities/cap-1", []string{"NAME", "STORAGECLASSNAME", "CAPACITY"},
				[]any{"cap-1", "fast", "10Gi"}},
			{"/apis/storage.k8s.io/v1/volumeattributesclasses/gold", []string{"NAME", "DRIVERNAME", "AGE"}, []any{"gold", "csi.example.com", recent}},
		} {
			t.Run(c.path, func(t *testing.T) { checkTable(t, getTable(t, e, c.path), c.headers, c.row) })
		}
	})
}
