package apiserver

import (
	"fmt"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Validation of the DaemonSet and StatefulSet fields their controllers
// act on, with kube-apiserver's messages: a value the controller cannot
// honour is refused at the door rather than reinterpreted later.

func nonNegative(v int64, p *field.Path) field.ErrorList {
	if v < 0 {
		return field.ErrorList{field.Invalid(p, v, "must be greater than or equal to 0")}
	}
	return nil
}

// intOrPercent checks a non-negative integer or a percentage of at most
// 100%.
func intOrPercent(v intstr.IntOrString, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch v.Type {
	case intstr.String:
		for _, msg := range validation.IsValidPercent(v.StrVal) {
			errs = append(errs, field.Invalid(p, v, msg))
		}
		if n, err := strconv.Atoi(strings.TrimSuffix(v.StrVal, "%")); err == nil && n > 100 {
			errs = append(errs, field.Invalid(p, v, "must not be greater than 100%"))
		}
	case intstr.Int:
		errs = append(errs, nonNegative(int64(v.IntValue()), p)...)
	default:
		errs = append(errs, field.Invalid(p, v, "must be an integer or percentage (e.g '5%')"))
	}
	return errs
}

// isZero: 0 or 0%; an invalid value is left to intOrPercent.
func isZero(v *intstr.IntOrString) bool {
	if v == nil {
		return true
	}
	if v.Type == intstr.String {
		n, err := strconv.Atoi(strings.TrimSuffix(v.StrVal, "%"))
		return err == nil && n == 0
	}
	return v.IntValue() == 0
}

func validateDaemonSetSpec(s *appsv1.DaemonSetSpec, p *field.Path) field.ErrorList {
	errs := nonNegative(int64(s.MinReadySeconds), p.Child("minReadySeconds"))
	if s.RevisionHistoryLimit != nil {
		errs = append(errs, nonNegative(int64(*s.RevisionHistoryLimit), p.Child("revisionHistoryLimit"))...)
	}
	sp := p.Child("updateStrategy")
	switch s.UpdateStrategy.Type {
	case appsv1.OnDeleteDaemonSetStrategyType:
	case appsv1.RollingUpdateDaemonSetStrategyType:
		ru := s.UpdateStrategy.RollingUpdate
		if ru == nil {
			return append(errs, field.Required(sp.Child("rollingUpdate"), ""))
		}
		rp := sp.Child("rollingUpdate")
		if ru.MaxUnavailable != nil {
			errs = append(errs, intOrPercent(*ru.MaxUnavailable, rp.Child("maxUnavailable"))...)
		}
		if ru.MaxSurge != nil {
			errs = append(errs, intOrPercent(*ru.MaxSurge, rp.Child("maxSurge"))...)
		}
		// Exactly one of them drives the update.
		switch unavailable, surge := !isZero(ru.MaxUnavailable), !isZero(ru.MaxSurge); {
		case unavailable && surge:
			errs = append(errs, field.Invalid(rp.Child("maxSurge"), ru.MaxSurge, "may not be set when maxUnavailable is non-zero"))
		case !unavailable && !surge:
			errs = append(errs, field.Required(rp.Child("maxUnavailable"), "cannot be 0 when maxSurge is 0"))
		}
	default:
		errs = append(errs, field.NotSupported(sp, s.UpdateStrategy, []string{string(appsv1.RollingUpdateDaemonSetStrategyType), string(appsv1.OnDeleteDaemonSetStrategyType)}))
	}
	return errs
}

func validateStatefulSetSpec(s *appsv1.StatefulSetSpec, p *field.Path) field.ErrorList {
	errs := nonNegative(int64(s.MinReadySeconds), p.Child("minReadySeconds"))
	if s.Ordinals != nil {
		errs = append(errs, nonNegative(int64(s.Ordinals.Start), p.Child("ordinals.start"))...)
	}
	switch s.PodManagementPolicy {
	case appsv1.OrderedReadyPodManagement, appsv1.ParallelPodManagement:
	default:
		errs = append(errs, field.Invalid(p.Child("podManagementPolicy"), s.PodManagementPolicy, fmt.Sprintf("must be '%s' or '%s'", appsv1.OrderedReadyPodManagement, appsv1.ParallelPodManagement)))
	}
	sp := p.Child("updateStrategy")
	switch ru := s.UpdateStrategy.RollingUpdate; s.UpdateStrategy.Type {
	case appsv1.OnDeleteStatefulSetStrategyType:
		if ru != nil {
			errs = append(errs, field.Invalid(sp.Child("rollingUpdate"), ru, fmt.Sprintf("only allowed for updateStrategy '%s'", appsv1.RollingUpdateStatefulSetStrategyType)))
		}
	case appsv1.RollingUpdateStatefulSetStrategyType:
		if ru == nil {
			break
		}
		rp := sp.Child("rollingUpdate")
		if ru.Partition != nil {
			errs = append(errs, nonNegative(int64(*ru.Partition), rp.Child("partition"))...)
		}
		if ru.MaxUnavailable != nil {
			errs = append(errs, intOrPercent(*ru.MaxUnavailable, rp.Child("maxUnavailable"))...)
			if isZero(ru.MaxUnavailable) {
				errs = append(errs, field.Invalid(rp.Child("maxUnavailable"), *ru.MaxUnavailable, "cannot be 0"))
			}
		}
	default:
		errs = append(errs, field.Invalid(sp, s.UpdateStrategy, fmt.Sprintf("must be '%s' or '%s'", appsv1.RollingUpdateStatefulSetStrategyType, appsv1.OnDeleteStatefulSetStrategyType)))
	}
	if pol := s.PersistentVolumeClaimRetentionPolicy; pol != nil {
		pp := p.Child("persistentVolumeClaimRetentionPolicy")
		valid := []string{string(appsv1.RetainPersistentVolumeClaimRetentionPolicyType), string(appsv1.DeletePersistentVolumeClaimRetentionPolicyType)}
		for _, f := range []struct {
			name string
			v    appsv1.PersistentVolumeClaimRetentionPolicyType
		}{{"whenDeleted", pol.WhenDeleted}, {"whenScaled", pol.WhenScaled}} {
			if f.v != appsv1.RetainPersistentVolumeClaimRetentionPolicyType && f.v != appsv1.DeletePersistentVolumeClaimRetentionPolicyType {
				errs = append(errs, field.NotSupported(pp.Child(f.name), f.v, valid))
			}
		}
	}
	return errs
}
