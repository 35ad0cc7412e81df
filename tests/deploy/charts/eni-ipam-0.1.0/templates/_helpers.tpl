{{/* The chart's name, at most 63 characters (a DNS label). */}}
{{- define "eni-ipam.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The release's full name: the release name, followed by the chart's unless it contains it. */}}
{{- define "eni-ipam.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "eni-ipam.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels the Deployment selects its pods by: never change them (selectors are immutable). */}}
{{- define "eni-ipam.selectorLabels" -}}
app.kubernetes.io/name: {{ include "eni-ipam.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "eni-ipam.labels" -}}
helm.sh/chart: {{ include "eni-ipam.chart" . }}
{{ include "eni-ipam.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: controller
app.kubernetes.io/part-of: eni-ipam
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "eni-ipam.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "eni-ipam.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "eni-ipam.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}
{{- end -}}

{{/* The Lease lives in config.kubernetes.lease_namespace, or else in the release namespace ($POD_NAMESPACE). */}}
{{- define "eni-ipam.leaseNamespace" -}}
{{- .Values.config.kubernetes.lease_namespace | default .Release.Namespace -}}
{{- end -}}

{{/* The run configuration file: the ConfigMap's config.yaml, and the pods' checksum/config. */}}
{{- define "eni-ipam.config" -}}
{{- if eq .Values.config.provider "aws" -}}
{{- $_ := required "config.aws.region is required with provider aws (--set config.aws.region=eu-west-1)" .Values.config.aws.region -}}
{{- end -}}
{{- toYaml .Values.config -}}
{{- end -}}
