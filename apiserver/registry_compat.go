package apiserver

import (
	"bonsai.dev/bonsai/apiserver/registry"
)

// The table helpers of package registry under the names this package's
// printers use.
type printer = registry.Printer

const (
	tString  = registry.TString
	tInteger = registry.TInteger
	tBoolean = registry.TBoolean
	tDate    = registry.TDate
)

var (
	col              = registry.Col
	wide             = registry.Wide
	cols             = registry.Cols
	objectMetaDoc    = registry.ObjectMetaDoc
	nameCol          = registry.NameCol
	ageCol           = registry.AgeCol
	containersCol    = registry.ContainersCol
	imagesCol        = registry.ImagesCol
	since            = registry.Since
	age              = registry.Age
	orNone           = registry.OrNone
	orDefault        = registry.OrDefault
	boolWord         = registry.BoolWord
	replicasOr1      = registry.ReplicasOr1
	containerColumns = registry.ContainerColumns
	withContainers   = registry.WithContainers
	moreList         = registry.MoreList
	selectorString   = registry.SelectorString
	strOr            = registry.StrOr
	uniqueSorted     = registry.UniqueSorted
	defaultPrinter   = *registry.DefaultPrinter
)
