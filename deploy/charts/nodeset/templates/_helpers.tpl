{{/* Labels every object of the release has, besides its own. */}}
{{- define "nodeset.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}

{{/* The nodeset-controller image (it also holds nodeset-certs). */}}
{{- define "nodeset.nodesetControllerImage" -}}
{{ .Values.image.nodesetController }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* The node-controller image. */}}
{{- define "nodeset.nodeControllerImage" -}}
{{ .Values.image.nodeController }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* True (non-empty) when an AWS driver is enabled. */}}
{{- define "nodeset.aws" -}}
{{- if or (has "eks-asg" .Values.drivers.enabled) (has "eks-managed" .Values.drivers.enabled) }}true{{ end }}
{{- end }}

{{/* Refuses values the controllers cannot run with. */}}
{{- define "nodeset.validate" -}}
{{- if ne .Release.Namespace "nodeset-system" }}
{{- fail (printf "install nodeset into the namespace nodeset-system (helm install -n nodeset-system --create-namespace), not %q: the node controller reads credentials Secrets and keeps its Leases there" .Release.Namespace) }}
{{- end }}
{{- if not .Values.drivers.enabled }}
{{- fail "drivers.enabled: name at least one driver" }}
{{- end }}
{{- $listed := dict }}
{{- range .Values.drivers.enabled }}
{{- if not (has . (list "simulated" "docker-machine" "eks-asg" "eks-managed")) }}
{{- fail (printf "drivers.enabled: unknown driver %q; the built-in drivers are simulated, docker-machine, eks-asg and eks-managed" .) }}
{{- end }}
{{- if hasKey $listed . }}
{{- fail (printf "drivers.enabled: driver %q is listed twice; name each driver once" .) }}
{{- end }}
{{- $_ := set $listed . true }}
{{- end }}
{{- if and (include "nodeset.aws" .) (not .Values.drivers.aws.clusterName) }}
{{- fail "drivers.aws.clusterName: set a cluster name unique in the AWS account with eks-asg or eks-managed" }}
{{- end }}
{{- if not (has .Values.certificates.provider (list "nodeset-certs" "cert-manager")) }}
{{- fail (printf "certificates.provider: %q is neither nodeset-certs nor cert-manager" .Values.certificates.provider) }}
{{- end }}
{{- range $name := list "nodesetController" "nodeController" }}
{{- $c := index $.Values $name }}
{{- if and (gt (int $c.replicas) 1) (not $c.leaderElect) }}
{{- fail (printf "%s: more than one replica needs leaderElect" $name) }}
{{- end }}
{{- end }}
{{- end }}

{{/* The pod template of the nodeset-certs Job and CronJob. */}}
{{- define "nodeset.certsPod" -}}
metadata:
  labels:
    app.kubernetes.io/name: nodeset-certs
spec:
  serviceAccountName: nodeset-certs
  restartPolicy: OnFailure
  {{- with .Values.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  securityContext:
    runAsNonRoot: true
    seccompProfile:
      type: RuntimeDefault
  containers:
  - name: nodeset-certs
    image: {{ include "nodeset.nodesetControllerImage" . }}
    {{- with .Values.image.pullPolicy }}
    imagePullPolicy: {{ . }}
    {{- end }}
    command: ["/usr/local/bin/nodeset-certs"]
    args: ["--namespace={{ .Release.Namespace }}"]
    resources:
      requests: {cpu: 10m, memory: 32Mi}
      limits: {memory: 64Mi}
    securityContext:
      allowPrivilegeEscalation: false
      readOnlyRootFilesystem: true
      capabilities:
        drop: ["ALL"]
{{- end }}

{{/* The spec of the nodeset-certs Job. */}}
{{- define "nodeset.certsJobSpec" -}}
backoffLimit: 6
ttlSecondsAfterFinished: 3600
template:
  {{- include "nodeset.certsPod" . | nindent 2 }}
{{- end }}

{{/*
The name of the nodeset-certs Job: a hash of its spec and the release
revision. A Job's pod template cannot change, so the name changes whenever the
template does: helm template (Argo CD, kubectl apply) renders revision 1 every
time, and a new image there is a new Job rather than a refused change to the
old one; the same values name the same Job. helm install, upgrade and
rollback name a new Job at each revision, which runs again.
*/}}
{{- define "nodeset.certsJobName" -}}
nodeset-certs-{{ printf "%s\nrevision: %d" (include "nodeset.certsJobSpec" .) (int .Release.Revision) | sha256sum | trunc 10 }}
{{- end }}

{{/* nodeSelector, tolerations and affinity of a controller's pods, when set. */}}
{{- define "nodeset.placement" -}}
{{- with .nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}
