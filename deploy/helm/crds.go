package helm

// The k3s helm-controller's kinds, as bonsai installs them at start (k3s
// does the same): the fields of k3s-io/helm-controller's HelmChart and
// HelmChartConfig, with the status this controller writes. k3s's Job
// column is its release's revision and conditions here: there is no Job.

const helmChartCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: helmcharts.helm.cattle.io
  labels: {app.kubernetes.io/managed-by: bonsai}
spec:
  group: helm.cattle.io
  scope: Namespaced
  names: {kind: HelmChart, listKind: HelmChartList, plural: helmcharts, singular: helmchart}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    additionalPrinterColumns:
    - {name: Chart, type: string, jsonPath: .spec.chart}
    - {name: TargetNamespace, type: string, jsonPath: .spec.targetNamespace}
    - {name: Version, type: string, jsonPath: .spec.version}
    - {name: Repo, type: string, jsonPath: .spec.repo}
    - {name: Revision, type: integer, jsonPath: .status.revision}
    - {name: Deployed, type: string, jsonPath: '.status.conditions[?(@.type=="Deployed")].status'}
    - {name: Failed, type: string, jsonPath: '.status.conditions[?(@.type=="Failed")].status'}
    - {name: HelmVersion, type: string, jsonPath: .spec.helmVersion, priority: 1}
    - {name: Bootstrap, type: string, jsonPath: .spec.bootstrap, priority: 1}
    - {name: Age, type: date, jsonPath: .metadata.creationTimestamp}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              targetNamespace: {type: string}
              createNamespace: {type: boolean}
              chart: {type: string}
              version: {type: string}
              repo: {type: string}
              repoCA: {type: string}
              repoCAConfigMap:
                type: object
                properties: {name: {type: string}}
              set:
                type: object
                additionalProperties: {x-kubernetes-int-or-string: true}
              valuesContent: {type: string}
              valuesSecrets:
                type: array
                items:
                  type: object
                  x-kubernetes-preserve-unknown-fields: true
              helmVersion: {type: string}
              bootstrap: {type: boolean}
              chartContent: {type: string}
              jobImage: {type: string}
              backOffLimit: {type: integer, format: int32}
              timeout: {type: string}
              failurePolicy: {type: string}
              authSecret:
                type: object
                properties: {name: {type: string}}
              authPassCredentials: {type: boolean}
              insecureSkipTLSVerify: {type: boolean}
              plainHTTP: {type: boolean}
              dockerRegistrySecret:
                type: object
                properties: {name: {type: string}}
              podSecurityContext:
                type: object
                x-kubernetes-preserve-unknown-fields: true
              securityContext:
                type: object
                x-kubernetes-preserve-unknown-fields: true
          status:
            type: object
            x-kubernetes-preserve-unknown-fields: true
`

const helmChartConfigCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: helmchartconfigs.helm.cattle.io
  labels: {app.kubernetes.io/managed-by: bonsai}
spec:
  group: helm.cattle.io
  scope: Namespaced
  names: {kind: HelmChartConfig, listKind: HelmChartConfigList, plural: helmchartconfigs, singular: helmchartconfig}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              valuesContent: {type: string}
              valuesSecrets:
                type: array
                items:
                  type: object
                  x-kubernetes-preserve-unknown-fields: true
              failurePolicy: {type: string}
`
