package apiserver

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"slices"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagemigrationv1 "k8s.io/api/storagemigration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/apis/flowcontrol/bootstrap"
	"k8s.io/utils/ptr"

	"bonsai.dev/bonsai/store"
)

// API Priority and Fairness' objects as kube-apiserver keeps them: the
// mandatory and suggested configuration exists from the start, the
// mandatory specs are fixed, a suggested object an admin took over
// (auto-update off) keeps its spec across a restart, v1's defaults and
// validation, the Dangling condition and the columns.
func TestFlowControlObjects(t *testing.T) {
	st, err := store.OpenBadger(store.BadgerOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	s, cs := newServerOn(t, st, Config{})
	e := &testEnv{s: s, st: st, cs: cs, ctx: t.Context()}
	fc := cs.FlowcontrolV1()

	var wantLevels, wantSchemas []string
	for _, o := range slices.Concat(bootstrap.MandatoryPriorityLevelConfigurations, bootstrap.SuggestedPriorityLevelConfigurations) {
		wantLevels = append(wantLevels, o.Name)
	}
	for _, o := range slices.Concat(bootstrap.MandatoryFlowSchemas, bootstrap.SuggestedFlowSchemas) {
		wantSchemas = append(wantSchemas, o.Name)
	}
	levels, err := fc.PriorityLevelConfigurations().List(e.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var gotLevels []string
	for _, l := range levels.Items {
		gotLevels = append(gotLevels, l.Name)
		if l.Annotations[autoUpdateAnnotation] != "true" {
			t.Errorf("level %s: annotations %v", l.Name, l.Annotations)
		}
	}
	schemas, err := fc.FlowSchemas().List(e.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var gotSchemas []string
	for _, fs := range schemas.Items {
		gotSchemas = append(gotSchemas, fs.Name)
		if len(fs.Status.Conditions) != 1 || fs.Status.Conditions[0].Type != flowcontrolv1.FlowSchemaConditionDangling || fs.Status.Conditions[0].Status != flowcontrolv1.ConditionFalse {
			t.Errorf("flowschema %s: conditions %+v", fs.Name, fs.Status.Conditions)
		}
	}
	slices.Sort(wantLevels)
	slices.Sort(wantSchemas)
	slices.Sort(gotLevels)
	slices.Sort(gotSchemas)
	if !slices.Equal(gotLevels, wantLevels) || !slices.Equal(gotSchemas, wantSchemas) {
		t.Fatalf("levels %v, want %v; schemas %v, want %v", gotLevels, wantLevels, gotSchemas, wantSchemas)
	}

	t.Run("mandatory specs are fixed", func(t *testing.T) {
		ca, err := fc.PriorityLevelConfigurations().Get(e.ctx, "catch-all", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ca.Spec.Limited.NominalConcurrencyShares = ptr.To(int32(500))
		_, err = fc.PriorityLevelConfigurations().Update(e.ctx, ca, metav1.UpdateOptions{})
		wantInvalid(t, "catch-all", err, "spec: Invalid value", "spec of 'catch-all' must equal the fixed value")
		ex, err := fc.PriorityLevelConfigurations().Get(e.ctx, "exempt", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// The exempt level's spec.exempt is the admin's to tune.
		ex.Spec.Exempt.NominalConcurrencyShares = ptr.To(int32(5))
		if _, err := fc.PriorityLevelConfigurations().Update(e.ctx, ex, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		fs, err := fc.FlowSchemas().Get(e.ctx, "exempt", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		fs.Spec.MatchingPrecedence = 2
		_, err = fc.FlowSchemas().Update(e.ctx, fs, metav1.UpdateOptions{})
		wantInvalid(t, "exempt schema", err, "spec of 'exempt' must equal the fixed value")
	})

	t.Run("defaults and validation", func(t *testing.T) {
		pl, err := fc.PriorityLevelConfigurations().Create(e.ctx, &flowcontrolv1.PriorityLevelConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "batch"},
			Spec: flowcontrolv1.PriorityLevelConfigurationSpec{Type: flowcontrolv1.PriorityLevelEnablementLimited, Limited: &flowcontrolv1.LimitedPriorityLevelConfiguration{
				LimitResponse: flowcontrolv1.LimitResponse{Type: flowcontrolv1.LimitResponseTypeQueue, Queuing: &flowcontrolv1.QueuingConfiguration{}}}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		l := pl.Spec.Limited
		if *l.NominalConcurrencyShares != 30 || *l.LendablePercent != 0 || *l.LimitResponse.Queuing != (flowcontrolv1.QueuingConfiguration{Queues: 64, HandSize: 8, QueueLengthLimit: 50}) || pl.Generation != 1 {
			t.Errorf("defaults: %+v %+v generation %d", l, l.LimitResponse.Queuing, pl.Generation)
		}
		_, err = fc.PriorityLevelConfigurations().Create(e.ctx, &flowcontrolv1.PriorityLevelConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "bad"},
			Spec: flowcontrolv1.PriorityLevelConfigurationSpec{Type: flowcontrolv1.PriorityLevelEnablementLimited, Limited: &flowcontrolv1.LimitedPriorityLevelConfiguration{
				LendablePercent: ptr.To(int32(101)),
				LimitResponse:   flowcontrolv1.LimitResponse{Type: flowcontrolv1.LimitResponseTypeQueue, Queuing: &flowcontrolv1.QueuingConfiguration{Queues: 4, HandSize: 5}}}}}, metav1.CreateOptions{})
		wantInvalid(t, "bad level", err,
			"spec.limited.lendablePercent: Invalid value: 101: must be between 0 and 100, inclusive",
			"spec.limited.limitResponse.queuing.handSize: Invalid value: 5: should not be greater than queues (4)")
		_, err = fc.PriorityLevelConfigurations().Create(e.ctx, &flowcontrolv1.PriorityLevelConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "not-exempt"},
			Spec: flowcontrolv1.PriorityLevelConfigurationSpec{Type: flowcontrolv1.PriorityLevelEnablementExempt}}, metav1.CreateOptions{})
		wantInvalid(t, "exempt type", err, "spec.type: Invalid value: \"Exempt\": must be 'Exempt' if and only if `name` is 'exempt'")

		fs, err := fc.FlowSchemas().Create(e.ctx, &flowcontrolv1.FlowSchema{ObjectMeta: metav1.ObjectMeta{Name: "batch-jobs"},
			Spec: flowcontrolv1.FlowSchemaSpec{PriorityLevelConfiguration: flowcontrolv1.PriorityLevelConfigurationReference{Name: "batch"},
				Rules: []flowcontrolv1.PolicyRulesWithSubjects{{
					Subjects:      []flowcontrolv1.Subject{{Kind: flowcontrolv1.SubjectKindServiceAccount, ServiceAccount: &flowcontrolv1.ServiceAccountSubject{Namespace: "batch", Name: "*"}}},
					ResourceRules: []flowcontrolv1.ResourcePolicyRule{{Verbs: []string{"*"}, APIGroups: []string{"batch"}, Resources: []string{"jobs"}, Namespaces: []string{"*"}}}}}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if fs.Spec.MatchingPrecedence != 1000 || len(fs.Status.Conditions) != 0 {
			t.Errorf("schema: precedence %d, status %+v", fs.Spec.MatchingPrecedence, fs.Status)
		}
		_, err = fc.FlowSchemas().Create(e.ctx, &flowcontrolv1.FlowSchema{ObjectMeta: metav1.ObjectMeta{Name: "bad"},
			Spec: flowcontrolv1.FlowSchemaSpec{MatchingPrecedence: 1,
				Rules: []flowcontrolv1.PolicyRulesWithSubjects{{
					Subjects:         []flowcontrolv1.Subject{{Kind: flowcontrolv1.SubjectKindUser, Group: &flowcontrolv1.GroupSubject{Name: "g"}}},
					NonResourceRules: []flowcontrolv1.NonResourcePolicyRule{{Verbs: []string{"get", "fly"}, NonResourceURLs: []string{"/a/*/b"}}}}}}}, metav1.CreateOptions{})
		wantInvalid(t, "bad schema", err,
			"spec.matchingPrecedence: Invalid value: 1: only the schema named 'exempt' may have matchingPrecedence 1",
			"spec.priorityLevelConfiguration.name: Required value: must reference a priority level",
			"spec.rules[0].subjects[0].user: Required value: user is required when subject kind is 'User'",
			"spec.rules[0].subjects[0].group: Forbidden: group is forbidden when subject kind is not 'Group'",
			`spec.rules[0].nonResourceRules[0].verbs: Unsupported value: ["get","fly"]`,
			`spec.rules[0].nonResourceRules[0].nonResourceURLs[0]: Invalid value: "/a/*/b": wildcard can only do suffix matching`)
	})

	t.Run("dangling", func(t *testing.T) {
		if _, err := fc.FlowSchemas().Create(e.ctx, &flowcontrolv1.FlowSchema{ObjectMeta: metav1.ObjectMeta{Name: "orphan"},
			Spec: flowcontrolv1.FlowSchemaSpec{PriorityLevelConfiguration: flowcontrolv1.PriorityLevelConfigurationReference{Name: "nowhere"}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := s.updateDanglingFlowSchemas(e.ctx); err != nil {
			t.Fatal(err)
		}
		for name, want := range map[string]flowcontrolv1.ConditionStatus{"orphan": flowcontrolv1.ConditionTrue, "batch-jobs": flowcontrolv1.ConditionFalse} {
			fs, err := fc.FlowSchemas().Get(e.ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if c := fs.Status.Conditions; len(c) != 1 || c[0].Status != want || !strings.Contains(c[0].Message, fs.Spec.PriorityLevelConfiguration.Name) {
				t.Errorf("%s: conditions %+v, want Dangling %s", name, c, want)
			}
		}
		checkTable(t, getTable(t, e, "/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas/orphan"),
			[]string{"NAME", "PRIORITYLEVEL", "MATCHINGPRECEDENCE", "DISTINGUISHERMETHOD", "AGE", "MISSINGPL"},
			[]any{"orphan", "nowhere", float64(1000), "<none>", recent, "True"})
		// kubectl get flowschemas lists them in matching order.
		var order []string
		for _, row := range getTable(t, e, "/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas").Rows {
			order = append(order, row.Cells[0].(string))
		}
		if want := []string{"exempt", "probes", "system-leader-election"}; !slices.Equal(order[:3], want) || order[len(order)-1] != "catch-all" {
			t.Errorf("flowschema rows %v, want %v first and catch-all last", order, want)
		}
		checkTable(t, getTable(t, e, "/apis/flowcontrol.apiserver.k8s.io/v1/prioritylevelconfigurations/exempt"),
			[]string{"NAME", "TYPE", "NOMINALCONCURRENCYSHARES", "QUEUES", "HANDSIZE", "QUEUELENGTHLIMIT", "AGE"},
			[]any{"exempt", "Exempt", "<none>", "<none>", "<none>", "<none>", recent})
		checkTable(t, getTable(t, e, "/apis/flowcontrol.apiserver.k8s.io/v1/prioritylevelconfigurations/batch"),
			[]string{"NAME", "TYPE", "NOMINALCONCURRENCYSHARES", "QUEUES", "HANDSIZE", "QUEUELENGTHLIMIT", "AGE"},
			[]any{"batch", "Limited", float64(30), float64(64), float64(8), float64(50), recent})
	})

	t.Run("restart", func(t *testing.T) {
		// An admin's suggested object with auto-update off keeps its spec;
		// one left on auto-update and a deleted one come back as the
		// server has them.
		wl, err := fc.PriorityLevelConfigurations().Get(e.ctx, "workload-low", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		wl.Annotations[autoUpdateAnnotation] = "false"
		wl.Spec.Limited.NominalConcurrencyShares = ptr.To(int32(7))
		if _, err := fc.PriorityLevelConfigurations().Update(e.ctx, wl, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		wh, err := fc.PriorityLevelConfigurations().Get(e.ctx, "workload-high", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		shares := *wh.Spec.Limited.NominalConcurrencyShares
		wh.Spec.Limited.NominalConcurrencyShares = ptr.To(shares + 1)
		if _, err := fc.PriorityLevelConfigurations().Update(e.ctx, wh, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := fc.FlowSchemas().Delete(e.ctx, "probes", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := s.ensureFlowControl(e.ctx); err != nil {
			t.Fatal(err)
		}
		if wl, _ = fc.PriorityLevelConfigurations().Get(e.ctx, "workload-low", metav1.GetOptions{}); *wl.Spec.Limited.NominalConcurrencyShares != 7 {
			t.Errorf("workload-low (auto-update off) shares %d, want 7", *wl.Spec.Limited.NominalConcurrencyShares)
		}
		if wh, _ = fc.PriorityLevelConfigurations().Get(e.ctx, "workload-high", metav1.GetOptions{}); *wh.Spec.Limited.NominalConcurrencyShares != shares {
			t.Errorf("workload-high shares %d, want the server's %d", *wh.Spec.Limited.NominalConcurrencyShares, shares)
		}
		if _, err := fc.FlowSchemas().Get(e.ctx, "probes", metav1.GetOptions{}); err != nil {
			t.Errorf("probes not recreated: %v", err)
		}
	})
}

// caPEM is a self-signed CA certificate.
func caPEM(t *testing.T, cn string, isCA bool) string {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn}, NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour),
		IsCA: isCA, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

// ClusterTrustBundles as kube-apiserver serves them: names tied to the
// signer, trust anchors checked, signerName immutable, attest needed on
// the signer, the columns and the signerName field selector.
func TestClusterTrustBundles(t *testing.T) {
	r := newRBACEnv(t, "RBAC")
	e := struct {
		s   *Server
		ctx context.Context
	}{r.s, r.ctx}
	admin := r.admin
	ctbs := admin.CertificatesV1().ClusterTrustBundles()
	ca := caPEM(t, "edge-ca", true)
	b, err := ctbs.Create(e.ctx, &certificatesv1.ClusterTrustBundle{ObjectMeta: metav1.ObjectMeta{Name: "example.com:edge:v1"},
		Spec: certificatesv1.ClusterTrustBundleSpec{SignerName: "example.com/edge", TrustBundle: ca}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ctbs.Create(e.ctx, &certificatesv1.ClusterTrustBundle{ObjectMeta: metav1.ObjectMeta{Name: "plain"},
		Spec: certificatesv1.ClusterTrustBundleSpec{TrustBundle: ca + caPEM(t, "other", true)}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, signer, bundle string
		want                 []string
	}{
		{"example.com:other:x", "example.com/edge", ca, []string{"ClusterTrustBundle for signerName example.com/edge must be named with prefix example.com:edge:"}},
		{"a:b", "", ca, []string{`ClusterTrustBundle without signer name must not have ":" in its name`}},
		{"leaf", "", caPEM(t, "leaf", false), []string{"spec.trustBundle: Invalid value: \"<value omitted>\": entry 0 does not have the CA bit set"}},
		{"twice", "", ca + ca, []string{"duplicate trust anchor (indices [0 1])"}},
		{"empty", "", "", []string{"at least one trust anchor must be provided"}},
		{"key", "", "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n", []string{"entry 0 has bad block type: PRIVATE KEY"}},
		{"nodomain:x", "nodomain", ca, []string{"spec.signerName: Invalid value"}},
	} {
		_, err := ctbs.Create(e.ctx, &certificatesv1.ClusterTrustBundle{ObjectMeta: metav1.ObjectMeta{Name: c.name},
			Spec: certificatesv1.ClusterTrustBundleSpec{SignerName: c.signer, TrustBundle: c.bundle}}, metav1.CreateOptions{})
		wantInvalid(t, c.name, err, c.want...)
	}
	b.Spec.SignerName = "example.com/other"
	_, err = ctbs.Update(e.ctx, b, metav1.UpdateOptions{})
	wantInvalid(t, "signer change", err, "spec.signerName: Invalid value: \"example.com/other\": field is immutable")

	list, err := ctbs.List(e.ctx, metav1.ListOptions{FieldSelector: "spec.signerName=example.com/edge"})
	if err != nil || len(list.Items) != 1 || list.Items[0].Name != "example.com:edge:v1" {
		t.Fatalf("field selector: %v %v", list, err)
	}
	te := newTestEnv(t) // getTable asks without credentials
	if _, err := te.cs.CertificatesV1().ClusterTrustBundles().Create(te.ctx, &certificatesv1.ClusterTrustBundle{ObjectMeta: metav1.ObjectMeta{Name: "plain"},
		Spec: certificatesv1.ClusterTrustBundleSpec{TrustBundle: ca}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	checkTable(t, getTable(t, te, "/apis/certificates.k8s.io/v1/clustertrustbundles/plain"), []string{"NAME", "SIGNERNAME"}, []any{"plain", "<none>"})

	// A user who may create bundles but not attest for the signer.
	for _, o := range []any{
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "ctb-writer"}, Rules: []rbacv1.PolicyRule{{Verbs: []string{"create", "update", "get"}, APIGroups: []string{"certificates.k8s.io"}, Resources: []string{"clustertrustbundles"}}}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "ctb-writer"}, RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "ctb-writer"},
			Subjects: []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: "alice"}}},
	} {
		var err error
		switch o := o.(type) {
		case *rbacv1.ClusterRole:
			_, err = admin.RbacV1().ClusterRoles().Create(e.ctx, o, metav1.CreateOptions{})
		case *rbacv1.ClusterRoleBinding:
			_, err = admin.RbacV1().ClusterRoleBindings().Create(e.ctx, o, metav1.CreateOptions{})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	alice := e2eClient(t, e.s, userNamed("alice")).CertificatesV1().ClusterTrustBundles()
	// The authorizer follows the store's watch: wait until alice may
	// create bundles at all.
	eventually(t, "a bundle of no signer needs no attest", func() error {
		_, err := alice.Create(e.ctx, &certificatesv1.ClusterTrustBundle{ObjectMeta: metav1.ObjectMeta{Name: "mine"},
			Spec: certificatesv1.ClusterTrustBundleSpec{TrustBundle: ca}}, metav1.CreateOptions{})
		return err
	})
	_, err = alice.Create(e.ctx, &certificatesv1.ClusterTrustBundle{ObjectMeta: metav1.ObjectMeta{Name: "example.com:edge:v2"},
		Spec: certificatesv1.ClusterTrustBundleSpec{SignerName: "example.com/edge", TrustBundle: ca}}, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `user not permitted to attest for signerName "example.com/edge"`) {
		t.Fatalf("create without attest: %v", err)
	}
	if _, err := admin.RbacV1().ClusterRoles().Create(e.ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "edge-attest"},
		Rules: []rbacv1.PolicyRule{{Verbs: []string{"attest"}, APIGroups: []string{"certificates.k8s.io"}, Resources: []string{"signers"}, ResourceNames: []string{"example.com/*"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(e.ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "edge-attest"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "edge-attest"},
		Subjects: []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: "alice"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "create with attest on the signer's domain", func() error {
		_, err := alice.Create(e.ctx, &certificatesv1.ClusterTrustBundle{ObjectMeta: metav1.ObjectMeta{Name: "example.com:edge:v2"},
			Spec: certificatesv1.ClusterTrustBundleSpec{SignerName: "example.com/edge", TrustBundle: ca}}, metav1.CreateOptions{})
		return err
	})
}

// StorageVersionMigrations: the resource is required and fixed, and the
// status rules of kube-apiserver.
func TestStorageVersionMigrations(t *testing.T) {
	e := newTestEnv(t)
	svms := e.cs.StoragemigrationV1().StorageVersionMigrations()
	_, err := svms.Create(e.ctx, &storagemigrationv1.StorageVersionMigration{ObjectMeta: metav1.ObjectMeta{Name: "bad"},
		Spec: storagemigrationv1.StorageVersionMigrationSpec{Resource: metav1.GroupResource{Group: "Apps_", Resource: ""}}}, metav1.CreateOptions{})
	wantInvalid(t, "bad", err, "spec.resource.resource: Required value: resource is required to be set", `spec.resource.group: Invalid value: "Apps_"`)
	m, err := svms.Create(e.ctx, &storagemigrationv1.StorageVersionMigration{ObjectMeta: metav1.ObjectMeta{Name: "secrets"},
		Spec: storagemigrationv1.StorageVersionMigrationSpec{Resource: metav1.GroupResource{Resource: "secrets"}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m.Spec.Resource.Resource = "configmaps"
	_, err = svms.Update(e.ctx, m, metav1.UpdateOptions{})
	wantInvalid(t, "spec change", err, "spec: Invalid value", "field is immutable")
	m, _ = svms.Get(e.ctx, "secrets", metav1.GetOptions{})
	now := metav1.Now()
	m.Status.ResourceVersion = "12"
	m.Status.Conditions = []metav1.Condition{
		{Type: string(storagemigrationv1.MigrationSucceeded), Status: metav1.ConditionTrue, Reason: "Done", LastTransitionTime: now},
		{Type: string(storagemigrationv1.MigrationFailed), Status: metav1.ConditionTrue, Reason: "Failed", LastTransitionTime: now}}
	_, err = svms.UpdateStatus(e.ctx, m, metav1.UpdateOptions{})
	wantInvalid(t, "both", err, "Both success and failed conditions cannot be true at the same time")
	m.Status.Conditions = m.Status.Conditions[:1]
	if m, err = svms.UpdateStatus(e.ctx, m, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	m.Status.ResourceVersion = "13"
	m.Status.Conditions[0].Status = metav1.ConditionFalse
	_, err = svms.UpdateStatus(e.ctx, m, metav1.UpdateOptions{})
	wantInvalid(t, "taken back", err, `status.resourceVersion: Invalid value: "13": field is immutable`, "Success condition cannot be set to false once it is true")
}

// POST namespaces/NS/bindings binds the pod the Binding names, as
// pods/binding does; a Binding without a name or of another namespace is
// refused and binds nothing.
func TestTopLevelBindings(t *testing.T) {
	e := newTestEnv(t)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
	if _, err := e.cs.CoreV1().Pods("default").Create(e.ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	post := func(b *corev1.Binding) error {
		return e.cs.CoreV1().RESTClient().Post().Namespace("default").Resource("bindings").Body(b).Do(e.ctx).Error()
	}
	err := post(&corev1.Binding{Target: corev1.ObjectReference{Kind: "Node", Name: "node-1"}})
	wantInvalid(t, "no name", err, "metadata.name: Required value")
	err = post(&corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "other"}, Target: corev1.ObjectReference{Kind: "Node", Name: "node-1"}})
	if !apierrors.IsBadRequest(err) {
		t.Fatalf("other namespace: %v", err)
	}
	if err := post(&corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: "nosuch"}, Target: corev1.ObjectReference{Kind: "Node", Name: "node-1"}}); !apierrors.IsNotFound(err) {
		t.Fatalf("missing pod: %v", err)
	}
	if got, _ := e.cs.CoreV1().Pods("default").Get(e.ctx, "web", metav1.GetOptions{}); got.Spec.NodeName != "" {
		t.Fatalf("refused bindings bound the pod to %q", got.Spec.NodeName)
	}
	if err := post(&corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Target: corev1.ObjectReference{Kind: "Node", Name: "node-1"}}); err != nil {
		t.Fatal(err)
	}
	got, err := e.cs.CoreV1().Pods("default").Get(e.ctx, "web", metav1.GetOptions{})
	if err != nil || got.Spec.NodeName != "node-1" {
		t.Fatalf("bound pod: %v %v", got.Spec.NodeName, err)
	}
	if err := post(&corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Target: corev1.ObjectReference{Kind: "Node", Name: "node-2"}}); !apierrors.IsConflict(err) {
		t.Fatalf("second binding: %v", err)
	}
}

// A StorageVersionMigration of secrets after a key rotation writes every
// Secret again with the new write key, records where it started and ends
// Succeeded; one of an unserved resource ends Failed; nothing is written
// twice.
func TestStorageVersionMigrationRewrites(t *testing.T) {
	st, err := store.OpenBadger(store.BadgerOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	key1, key2 := encKey(t, 32), encKey(t, 32)
	ctx := t.Context()
	first, cs := newServerOn(t, st, Config{Encryption: parseEnc(t, encConfig("secrets", "aesgcm", "key1", key1))})
	for _, name := range []string{"a", "b"} {
		if _, err := cs.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string][]byte{"k": []byte(name)}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	first.Shutdown()
	s, cs := serverOver(t, st, Config{Encryption: parseEnc(t, encConfig("secrets", "aesgcm", "key2", key2, "key1", key1))})
	svms := cs.StoragemigrationV1().StorageVersionMigrations()
	for name, gr := range map[string]metav1.GroupResource{"secrets": {Resource: "secrets"}, "nothing": {Group: "example.com", Resource: "widgets"}} {
		if _, err := svms.Create(ctx, &storagemigrationv1.StorageVersionMigration{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: storagemigrationv1.StorageVersionMigrationSpec{Resource: gr}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.runStorageMigrations(ctx); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "b"} {
		if kv, _ := st.Get(ctx, "/registry/core/secrets/default/"+name); !bytes.HasPrefix(kv.Value, []byte("k8s:enc:aesgcm:v1:key2:")) {
			t.Errorf("secret %s stored as %q after the migration", name, kv.Value[:24])
		}
		if got, err := cs.CoreV1().Secrets("default").Get(ctx, name, metav1.GetOptions{}); err != nil || string(got.Data["k"]) != name {
			t.Errorf("secret %s after the migration: %v %v", name, got, err)
		}
	}
	m, err := svms.Get(ctx, "secrets", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ok := meta.FindStatusCondition(m.Status.Conditions, string(storagemigrationv1.MigrationSucceeded))
	running := meta.FindStatusCondition(m.Status.Conditions, string(storagemigrationv1.MigrationRunning))
	if m.Status.ResourceVersion == "" || ok == nil || ok.Status != metav1.ConditionTrue || ok.Message != "2 objects written again" || running == nil || running.Status != metav1.ConditionFalse {
		t.Errorf("secrets migration status: %+v", m.Status)
	}
	bad, _ := svms.Get(ctx, "nothing", metav1.GetOptions{})
	if c := meta.FindStatusCondition(bad.Status.Conditions, string(storagemigrationv1.MigrationFailed)); c == nil || c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, "widgets.example.com") {
		t.Errorf("migration of an unserved resource: %+v", bad.Status)
	}
	// A second migration finds nothing stale.
	if _, err := svms.Create(ctx, &storagemigrationv1.StorageVersionMigration{ObjectMeta: metav1.ObjectMeta{Name: "again"},
		Spec: storagemigrationv1.StorageVersionMigrationSpec{Resource: metav1.GroupResource{Resource: "secrets"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := s.runStorageMigrations(ctx); err != nil {
		t.Fatal(err)
	}
	if m, _ := svms.Get(ctx, "again", metav1.GetOptions{}); !strings.Contains(fmt.Sprint(m.Status.Conditions), "0 objects written again") {
		t.Errorf("second migration: %+v", m.Status)
	}
}
