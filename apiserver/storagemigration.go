package apiserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"

	storagemigrationv1 "k8s.io/api/storagemigration/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	storagemigrationregistry "bonsai.dev/bonsai/apiserver/registry/storagemigration"
	"bonsai.dev/bonsai/store"
)

var storageMigrationsGVR = gvr(storagemigrationregistry.Group, "v1", "storageversionmigrations")

// runStorageMigrations carries out the StorageVersionMigrations that have
// not finished, as kube-controller-manager's storage version migrator
// does: status.resourceVersion records the revision the migration starts
// at, every object of the resource stored before it is written again the
// way the server writes it now (a custom resource in its CRD's current
// storage version, a resource under encryption with the current write
// key), and the migration ends Succeeded, or Failed with the reason.
func (s *Server) runStorageMigrations(ctx context.Context) error {
	res := s.reg.byGVR[storageMigrationsGVR]
	items, _, err := s.listObjects(ctx, res, "", listOptions{})
	if err != nil {
		return err
	}
	for _, o := range items {
		m := o.(*storagemigrationv1.StorageVersionMigration)
		if storagemigrationregistry.IsTrue(m, storagemigrationv1.MigrationSucceeded) || storagemigrationregistry.IsTrue(m, storagemigrationv1.MigrationFailed) {
			continue
		}
		target := s.storedResource(m.Spec.Resource)
		if target == nil {
			s.setMigrationStatus(ctx, m.Name, "", storagemigrationv1.MigrationFailed, "ResourceNotFound",
				fmt.Sprintf("the server does not serve %s", m.Spec.Resource.String()))
			continue
		}
		rev, err := s.cfg.Store.CurrentRevision(ctx)
		if err != nil {
			return err
		}
		if !s.setMigrationStatus(ctx, m.Name, strconv.FormatUint(rev, 10), storagemigrationv1.MigrationRunning, "Migrating", "") {
			continue
		}
		n, err := s.migrateStored(ctx, target, rev)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			s.setMigrationStatus(ctx, m.Name, "", storagemigrationv1.MigrationFailed, "MigrationFailed", err.Error())
			continue
		}
		s.log.Info("storage version migration", "name", m.Name, "resource", m.Spec.Resource.String(), "rewritten", n)
		s.setMigrationStatus(ctx, m.Name, "", storagemigrationv1.MigrationSucceeded, "Migrated", fmt.Sprintf("%d objects written again", n))
	}
	return nil
}

// storedResource is a served resource of gr whose objects are stored
// under their own keys (not shown from another resource's).
func (s *Server) storedResource(gr metav1.GroupResource) *resource {
	for _, reg := range s.registries() {
		for g, r := range reg.byGVR {
			if g.Group == gr.Group && g.Resource == gr.Resource && r.storage == nil && !r.createOnly && r.reader == nil {
				return r
			}
		}
	}
	return nil
}

// migrateStored writes again every object of res stored at or before
// rev whose stored form is not what the server writes now.
func (s *Server) migrateStored(ctx context.Context, res *resource, rev uint64) (int, error) {
	rewritten := 0
	opts := store.ListOptions{Limit: 500}
	for {
		page, err := s.cfg.Store.List(ctx, res.prefix(""), opts)
		if err != nil {
			return rewritten, err
		}
		for _, kv := range page.Items {
			if kv.Revision > rev {
				continue // written since the migration began, by the server of now
			}
			obj, err := decodeStored(res, kv)
			if err != nil {
				return rewritten, fmt.Errorf("%s: %w", kv.Key, err)
			}
			data, err := encodeForStore(res, obj)
			if err != nil {
				return rewritten, err
			}
			if bytes.Equal(data, kv.Value) && (s.encryption == nil || !s.encryption.Stale(ctx, kv.Key, kv.Revision)) {
				continue
			}
			switch _, err := s.cfg.Store.Update(ctx, kv.Key, data, kv.Revision); {
			case err == nil:
				rewritten++
			case errors.Is(err, store.ErrConflict), errors.Is(err, store.ErrNotFound):
				// Written or deleted meanwhile, by the server of now.
			default:
				return rewritten, err
			}
		}
		if page.Continue == "" {
			return rewritten, nil
		}
		opts.Continue = page.Continue
	}
}

// setMigrationStatus records a condition (True; Running turns False when
// the migration ends) and, once, the starting resourceVersion. It
// reports whether the write took.
func (s *Server) setMigrationStatus(ctx context.Context, name, rv string, t storagemigrationv1.MigrationConditionType, reason, msg string) bool {
	res := s.reg.byGVR[storageMigrationsGVR]
	obj, rev, err := s.getObject(ctx, res, "", name)
	if err != nil {
		return false
	}
	m := obj.(*storagemigrationv1.StorageVersionMigration).DeepCopy()
	if rv != "" && m.Status.ResourceVersion == "" {
		m.Status.ResourceVersion = rv
	}
	now := storedNow()
	meta.SetStatusCondition(&m.Status.Conditions, metav1.Condition{Type: string(t), Status: metav1.ConditionTrue, Reason: reason, Message: msg, LastTransitionTime: now})
	if t != storagemigrationv1.MigrationRunning && meta.FindStatusCondition(m.Status.Conditions, string(storagemigrationv1.MigrationRunning)) != nil {
		meta.SetStatusCondition(&m.Status.Conditions, metav1.Condition{Type: string(storagemigrationv1.MigrationRunning), Status: metav1.ConditionFalse, Reason: reason, LastTransitionTime: now})
	}
	data, err := encodeForStore(res, m)
	if err != nil {
		return false
	}
	if _, err := s.cfg.Store.Update(ctx, res.key("", name), data, rev); err != nil {
		s.log.Warn("storage version migration status", "name", name, "err", err)
		return false
	}
	return true
}
