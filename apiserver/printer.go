package apiserver

import "bonsai.dev/bonsai/apiserver/registry"

// printer is a kind's table columns: custom resources make theirs from
// their CRD's additionalPrinterColumns.
type printer = registry.Printer
