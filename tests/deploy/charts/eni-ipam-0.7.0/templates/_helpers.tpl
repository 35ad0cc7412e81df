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

{{/* The run configuration file: the ConfigMap's config.yaml, and the pods' checksum/config.
The AWS region has no default: a guessed one would point the controller at another region's
instances. An empty section (`aws: null`) or a blank region gets the same message as a missing one. */}}
{{- define "eni-ipam.config" -}}
{{- if eq .Values.config.provider "aws" -}}
{{- $aws := .Values.config.aws | default dict -}}
{{- $_ := required "config.aws.region is required with provider aws: set your cluster's region (--set config.aws.region=eu-west-1)" ($aws.region | default "" | trim) -}}
{{- end -}}
{{- toYaml .Values.config -}}
{{- end -}}

{{/* The node agent's objects: the release's full name followed by -agent, at most 63 characters. */}}
{{- define "eni-ipam.agentFullname" -}}
{{- printf "%s-agent" (include "eni-ipam.fullname" . | trunc 57 | trimSuffix "-") -}}
{{- end -}}

{{/* Labels the DaemonSet selects the agent's pods by: never change them (selectors are immutable). The
name is the agent's own, so the controller's Deployment, Service and PodDisruptionBudget, which select
the chart's name, never count an agent pod. */}}
{{- define "eni-ipam.agentSelectorLabels" -}}
app.kubernetes.io/name: {{ printf "%s-agent" (include "eni-ipam.name" . | trunc 57 | trimSuffix "-") }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "eni-ipam.agentLabels" -}}
helm.sh/chart: {{ include "eni-ipam.chart" . }}
{{ include "eni-ipam.agentSelectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: node-agent
app.kubernetes.io/part-of: eni-ipam
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* The agent's configuration file: the agent ConfigMap's config.yaml, and its pods' checksum/config. */}}
{{- define "eni-ipam.agentConfig" -}}
{{- $config := deepCopy .Values.agent.config }}
{{- if not .Values.agent.hostNetwork }}
{{- /* The pod has an address of its own, which kubelet probes: not the loopback one. */}}
{{- $server := $config.server | default dict }}
{{- $_ := set $server "probe_host" "0.0.0.0" }}
{{- $_ := set $config "server" $server }}
{{- end }}
{{- toYaml $config -}}
{{- end -}}

{{/* The agent's containers run as root (it creates a socket in a host directory, for the container
runtime to use, and reads the runtime's root-owned CNI cache) but with no capability at all: the files
it touches are root's own, which needs none. */}}
{{- define "eni-ipam.agentSecurityContext" -}}
runAsUser: 0
runAsGroup: 0
runAsNonRoot: false
privileged: false
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: [ALL]
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- /*
A pool gauge of the leader, for the alert rules: max across the installation's replicas, grouped by
"by"; and, only while the installation exports no pool gauge at all (a leader hand-over: the old
leader dropped its gauges, the new one has not applied its initial resync yet), each series' last
value within "gap". A node or subnet whose series the leader drops meanwhile (its deficit filled
above node_series_all_up_to) is gone at once, as without the bridge.
Arguments (a dict): name, match (extra matchers, may be empty), sel, by, inst (installation
labels), gap.
*/}}
{{- define "eni-ipam.leaderGauge" -}}
{{- $m := .sel }}{{ with .match }}{{ $m = printf "%s, %s" $m . }}{{ end -}}
(
  max by ({{ .by }}) ({{ .name }}{ {{- $m -}} })
  or
  (
    max by ({{ .by }}) (last_over_time({{ .name }}{ {{- $m -}} }[{{ .gap }}]))
    unless on ({{ .inst }})
    eni_ipam_ips{ {{- .sel -}} }
  )
)
{{- end }}

{{/* Values of another chart version (`helm upgrade --reuse-values` keeps the release's, made for
its chart): every key they lack, but under config, is taken from this chart's defaults
(templates/_defaults.tpl), in place, so no template reads a key that is not there. Values of this
chart version are left alone: helm already merged the defaults, and a key removed with null stays
removed. Every template includes this first. */}}
{{- define "eni-ipam.fillDefaults" -}}
{{- if ne (toString .Values.valuesVersion) .Chart.Version -}}
{{- include "eni-ipam.fillMissing" (list .Values (include "eni-ipam.defaultValues" . | fromYaml)) -}}
{{- $_ := set .Values "valuesVersion" .Chart.Version -}}
{{- end -}}
{{- end -}}

{{- define "eni-ipam.fillMissing" -}}
{{- $values := index . 0 -}}
{{- range $key, $default := index . 1 -}}
{{- if not (hasKey $values $key) -}}
{{- $_ := set $values $key (deepCopy $default) -}}
{{- else if and (kindIs "map" $default) (kindIs "map" (index $values $key)) -}}
{{- include "eni-ipam.fillMissing" (list (index $values $key) $default) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- /* A NetworkPolicy's ingress: Prometheus to the metrics port ("http"), the nodes' CIDRs to the
probe port ("probes"). With no peer at all, no rule: an empty "from" would allow every source, while
no rule denies all. Arguments (a dict): np (.Values.networkPolicy), http, probes (port names). */}}
{{- define "eni-ipam.ingress" -}}
{{- if or .np.prometheus .np.nodeCIDRs -}}
ingress:
  {{- with .np.prometheus }}
  - ports:
      - port: {{ $.http }}
        protocol: TCP
    from:
      {{- toYaml . | nindent 6 }}
  {{- end }}
  {{- with .np.nodeCIDRs }}
  - ports:
      - port: {{ $.probes }}
        protocol: TCP
    from:
      {{- range . }}
      - ipBlock:
          cidr: {{ . }}
      {{- end }}
  {{- end }}
{{- else -}}
# No peer allowed: an empty "from" would allow every source, so no rule at all, which denies all.
ingress: []
{{- end }}
{{- end -}}

{{- /* The installation's passes failing with one error class while a deficit waits: the condition of
EniIpamAllocationsFailing, by installation labels and reason, valued the failed share. Arguments (a
dict): sel, by (installation labels), rule (.Values.prometheusRule). */}}
{{- define "eni-ipam.outage" -}}
(
  sum by ({{ .by }}, reason) (rate(eni_ipam_node_maintenance_failures_total{ {{- .sel -}} }[{{ .rule.outageWindow }}]))
  / on ({{ .by }}) group_left
  sum by ({{ .by }}) (rate(eni_ipam_node_maintenance_passes_total{ {{- .sel -}} }[{{ .rule.outageWindow }}]))
  > {{ .rule.outageFailureShareAbove }}
  and on ({{ .by }})
  max by ({{ .by }}) (eni_ipam_oldest_deficit_seconds{ {{- .sel -}} }) > {{ .rule.outageDeficitAbove }}
)
{{- end -}}

{{- /* prometheusRule.countStep in seconds (it must be a whole number of seconds, minutes or hours:
"1m", "30s"), or the chart fails naming the value. */}}
{{- define "eni-ipam.stepSeconds" -}}
{{- $step := toString . -}}
{{- if not (regexMatch "^[1-9][0-9]*[smh]$" $step) -}}
{{- fail (printf "prometheusRule.countStep: %q is not a whole number of seconds, minutes or hours (1m, 30s)" $step) -}}
{{- end -}}
{{- $n := trimSuffix "s" (trimSuffix "m" (trimSuffix "h" $step)) | int -}}
{{- if hasSuffix "h" $step }}{{ mul $n 3600 }}{{ else if hasSuffix "m" $step }}{{ mul $n 60 }}{{ else }}{{ $n }}{{ end -}}
{{- end -}}

{{- /* An alert's keep_firing_for line (on a line of its own, at a rule's key indentation):
prometheusRule.keepFiringFor, or nothing when it is empty (Prometheus before 2.42 refuses the field).
Argument: .Values.prometheusRule. */}}
{{- define "eni-ipam.keepFiring" -}}
{{- with .keepFiringFor }}{{ printf "\n          keep_firing_for: %s" . }}{{ end }}
{{- end -}}
