package serviceaccount_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"

	"bonsai.dev/bonsai/client"
	"bonsai.dev/bonsai/controllers/serviceaccount"
	"bonsai.dev/bonsai/testsupport/clustertest"
)

const waitFor = 30 * time.Second

const testCA = "-----BEGIN CERTIFICATE-----\nMIIBtest\n-----END CERTIFICATE-----\n"

type runner interface{ Run(context.Context) error }

// start runs the API server and the controller build makes.
func start(t *testing.T, build func(serviceaccount.Config) (runner, error)) *clustertest.Env {
	t.Helper()
	e := clustertest.New(t, clustertest.Options{WithoutServiceAccounts: true})
	inf := client.NewInformers(e.Config)
	c, err := build(serviceaccount.Config{Client: e.Client, Informers: inf, Logger: e.Log, RootCA: []byte(testCA)})
	if err != nil {
		t.Fatal(err)
	}
	// Stopped before the server: cleanups run last-registered first.
	ctx, cancel := context.WithCancel(e.Ctx)
	inf.Start(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return e
}

func createNamespace(t *testing.T, e *clustertest.Env, name string) {
	t.Helper()
	if _, err := e.Client.Core.Namespaces().Create(e.Ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// terminate deletes a namespace; with no namespace controller running it
// stays Terminating.
func terminate(t *testing.T, e *clustertest.Env, name string) {
	t.Helper()
	if err := e.Client.Core.Namespaces().Delete(e.Ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, waitFor, func() error {
		ns, err := e.Client.Core.Namespaces().Get(e.Ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if ns.Status.Phase != corev1.NamespaceTerminating {
			return fmt.Errorf("namespace %s is %s", name, ns.Status.Phase)
		}
		return nil
	})
}

func TestDefaultServiceAccount(t *testing.T) {
	e := start(t, func(c serviceaccount.Config) (runner, error) { return serviceaccount.New(c) })
	sas := func(ns string) func() error {
		return func() error {
			_, err := e.Client.Core.ServiceAccounts(ns).Get(e.Ctx, serviceaccount.DefaultServiceAccountName, metav1.GetOptions{})
			return err
		}
	}
	createNamespace(t, e, "team-a")
	createNamespace(t, e, "doomed")
	clustertest.Eventually(t, waitFor, sas("team-a"))
	clustertest.Eventually(t, waitFor, sas("doomed"))

	// Deleted: made again, a new object.
	old, err := e.Client.Core.ServiceAccounts("team-a").Get(e.Ctx, serviceaccount.DefaultServiceAccountName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Client.Core.ServiceAccounts("team-a").Delete(e.Ctx, serviceaccount.DefaultServiceAccountName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, waitFor, func() error {
		sa, err := e.Client.Core.ServiceAccounts("team-a").Get(e.Ctx, serviceaccount.DefaultServiceAccountName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if sa.UID == old.UID {
			return fmt.Errorf("still the deleted account")
		}
		return nil
	})

	// In a Terminating namespace a deleted account stays deleted. The
	// queue is FIFO with one worker: once the account of team-a,
	// deleted after it, is back, doomed's turn has passed.
	terminate(t, e, "doomed")
	if err := e.Client.Core.ServiceAccounts("doomed").Delete(e.Ctx, serviceaccount.DefaultServiceAccountName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := e.Client.Core.ServiceAccounts("team-a").Delete(e.Ctx, serviceaccount.DefaultServiceAccountName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, waitFor, sas("team-a"))
	if err := sas("doomed")(); !apierrors.IsNotFound(err) {
		t.Fatalf("default account in a terminating namespace: %v, want it not made again", err)
	}
}

func TestRootCAPublisher(t *testing.T) {
	e := start(t, func(c serviceaccount.Config) (runner, error) { return serviceaccount.NewRootCAPublisher(c) })
	cms := func(ns string) *corev1.ConfigMap {
		t.Helper()
		cm, err := e.Client.Core.ConfigMaps(ns).Get(e.Ctx, serviceaccount.RootCACertConfigMapName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return cm
	}
	// published waits until ns has the CA ConfigMap as the publisher
	// writes it, other than uid old.
	published := func(ns string, old types.UID) {
		t.Helper()
		clustertest.Eventually(t, waitFor, func() error {
			cm, err := e.Client.Core.ConfigMaps(ns).Get(e.Ctx, serviceaccount.RootCACertConfigMapName, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if cm.UID == old {
				return fmt.Errorf("still the old ConfigMap")
			}
			if diff := cmp.Diff(map[string]string{"ca.crt": testCA}, cm.Data); diff != "" {
				return fmt.Errorf("data (-want +got):\n%s", diff)
			}
			if cm.Annotations[serviceaccount.DescriptionAnnotation] != serviceaccount.Description {
				return fmt.Errorf("annotations %v", cm.Annotations)
			}
			return nil
		})
	}
	for _, ns := range []string{"default", "kube-system"} {
		published(ns, "")
	}
	createNamespace(t, e, "team-a")
	createNamespace(t, e, "doomed")
	published("team-a", "")
	published("doomed", "")

	// Edited: put back, other keys dropped, other annotations kept.
	cm := cms("team-a")
	cm.Data = map[string]string{"ca.crt": "forged", "extra": "x"}
	cm.Annotations = map[string]string{"owner": "me"}
	if _, err := e.Client.Core.ConfigMaps("team-a").Update(e.Ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	published("team-a", "")
	if got := cms("team-a").Annotations["owner"]; got != "me" {
		t.Errorf("other annotation %q, want it kept", got)
	}

	// Deleted: made again.
	uid := cms("team-a").UID
	if err := e.Client.Core.ConfigMaps("team-a").Delete(e.Ctx, serviceaccount.RootCACertConfigMapName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	published("team-a", uid)

	// In a Terminating namespace a deleted one stays deleted (see
	// TestDefaultServiceAccount for why team-a's turn proves doomed's).
	terminate(t, e, "doomed")
	if err := e.Client.Core.ConfigMaps("doomed").Delete(e.Ctx, serviceaccount.RootCACertConfigMapName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	uid = cms("team-a").UID
	if err := e.Client.Core.ConfigMaps("team-a").Delete(e.Ctx, serviceaccount.RootCACertConfigMapName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	published("team-a", uid)
	if _, err := e.Client.Core.ConfigMaps("doomed").Get(e.Ctx, serviceaccount.RootCACertConfigMapName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("CA ConfigMap in a terminating namespace: %v, want it not made again", err)
	}
}

func TestRootCAPublisherNeedsCA(t *testing.T) {
	e := clustertest.New(t, clustertest.Options{})
	if _, err := serviceaccount.NewRootCAPublisher(serviceaccount.Config{Client: e.Client, Informers: client.NewInformers(e.Config)}); err == nil {
		t.Fatal("publisher built without a CA")
	}
}

// TestRootCAPublisherWatchesOnlyCAConfigMaps: the publisher's ConfigMap
// informer is filtered by the API server, so the process neither caches
// nor decodes other ConfigMaps, and a For informer of the kind is a
// different one.
func TestRootCAPublisherWatchesOnlyCAConfigMaps(t *testing.T) {
	e := clustertest.New(t, clustertest.Options{WithoutServiceAccounts: true})
	if _, err := e.Client.Core.ConfigMaps("default").Create(e.Ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "app-settings"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	inf := client.NewInformers(e.Config)
	p, err := serviceaccount.NewRootCAPublisher(serviceaccount.Config{Client: e.Client, Informers: inf, Logger: e.Log, RootCA: []byte(testCA)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(e.Ctx)
	defer cancel()
	inf.Start(ctx)
	go p.Run(ctx)
	if got, want := inf.Watching(), []string{"ConfigMap metadata.name=" + serviceaccount.RootCACertConfigMapName, "Namespace"}; !slices.Equal(got, want) {
		t.Fatalf("the publisher watches %q, want %q", got, want)
	}
	cmInf := inf.ForFields(&corev1.ConfigMap{}, fields.OneTermEqualSelector("metadata.name", serviceaccount.RootCACertConfigMapName))
	if cmInf == inf.For(&corev1.ConfigMap{}) {
		t.Fatal("For and ForFields gave the same informer")
	}
	clustertest.Eventually(t, waitFor, func() error {
		names := map[string]bool{}
		for _, o := range cmInf.GetStore().List() {
			names[o.(*corev1.ConfigMap).Name] = true
		}
		if len(names) != 1 || !names[serviceaccount.RootCACertConfigMapName] {
			return fmt.Errorf("the publisher's informer holds ConfigMaps named %v", names)
		}
		if _, ok, _ := cmInf.GetStore().GetByKey("default/" + serviceaccount.RootCACertConfigMapName); !ok {
			return fmt.Errorf("no default/%s in the publisher's informer yet", serviceaccount.RootCACertConfigMapName)
		}
		return nil
	})
}
