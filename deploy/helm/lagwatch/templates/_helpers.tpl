{{- define "lagwatch.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "lagwatch.fullname" -}}
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

{{- define "lagwatch.selectorLabels" -}}
app.kubernetes.io/name: {{ include "lagwatch.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "lagwatch.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "lagwatch.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "lagwatch.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "lagwatch.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "lagwatch.pipelineServiceAccountName" -}}
{{- if .Values.pipeline.serviceAccount.create -}}
{{- default (printf "%s-pipeline" (include "lagwatch.fullname" .)) .Values.pipeline.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.pipeline.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "lagwatch.image" -}}
{{- if .image.digest -}}
{{- printf "%s@%s" .image.repository .image.digest -}}
{{- else -}}
{{- printf "%s:%s" .image.repository (default .appVersion .image.tag) -}}
{{- end -}}
{{- end -}}

{{/* The config lagwatch reads: the user's `config`, with the paths and port the pod owns. */}}
{{- define "lagwatch.config" -}}
{{- $http := merge (dict "host" "0.0.0.0" "port" (int .Values.service.port)) (omit (default dict .Values.config.http) "host" "port") -}}
{{- $clusters := .Values.config.clusters | default (dict "kafka" (dict "bootstrap_servers" (list "kafka:9092"))) -}}
{{- $owned := dict "state_dir" "/var/lib/lagwatch" "http" $http "clusters" $clusters -}}
{{- /* lake.url: the one lake of the daemon and every CronJob; config.lake keeps its other settings (roll_*...). */ -}}
{{- with .Values.lake.url -}}
{{- $given := default dict $.Values.config.lake -}}
{{- $s3 := dict "region" $.Values.lake.s3.region -}}
{{- with $.Values.lake.s3.endpoint }}{{ $_ := set $s3 "endpoint" . }}{{ end -}}
{{- $lake := merge (dict "enabled" true "path" . "s3" (merge $s3 (default dict $given.s3))) (omit $given "enabled" "path" "s3") -}}
{{- $_ := set $owned "lake" $lake -}}
{{- end -}}
{{- toYaml (merge $owned (omit .Values.config "state_dir" "http" "clusters")) -}}
{{- end -}}

{{/* The projected sources of the secrets directory: `secrets`, and the lake's keys (lake.existingSecret) as the
files lake__s3__access_key_id and lake__s3__secret_access_key. The daemon and every CronJob mount the same. */}}
{{- define "lagwatch.secretSources" -}}
{{- $sources := list -}}
{{- range .Values.secrets -}}
{{- $s := dict "name" .name -}}
{{- with .items }}{{ $_ := set $s "items" . }}{{ end -}}
{{- if .optional }}{{ $_ := set $s "optional" true }}{{ end -}}
{{- $sources = append $sources (dict "secret" $s) -}}
{{- end -}}
{{- with .Values.lake.existingSecret -}}
{{- $k := $.Values.lake.secretKeys -}}
{{- $items := list (dict "key" $k.accessKeyId "path" "lake__s3__access_key_id") (dict "key" $k.secretAccessKey "path" "lake__s3__secret_access_key") -}}
{{- $sources = append $sources (dict "secret" (dict "name" . "items" $items)) -}}
{{- end -}}
{{- toYaml $sources -}}
{{- end -}}
