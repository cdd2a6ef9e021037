// The backends' model bucket access (irsa.modelReader): read-only, one bucket. s3:ListBucket
// lists the model's prefix (and lets a missing key read as 404 rather than 403); s3:GetObject
// reads the files (and HeadObject, for their SHA-256 checksums). Nothing else: no write, no
// other bucket. A bucket encrypted with a customer KMS key also needs kms:Decrypt on that key.

/** The inline policy document (JSON) for the model-reader role. */
export function modelReaderPolicy(bucket: string, prefix: string): string {
  const arn = `arn:aws:s3:::${bucket}`;
  const list: Record<string, unknown> = {
    Sid: 'ListModelBucket',
    Effect: 'Allow',
    Action: ['s3:ListBucket'],
    Resource: arn,
  };
  if (prefix) list.Condition = { StringLike: { 's3:prefix': [`${prefix}*`] } };
  return JSON.stringify({
    Version: '2012-10-17',
    Statement: [
      list,
      { Sid: 'ReadModels', Effect: 'Allow', Action: ['s3:GetObject'], Resource: `${arn}/${prefix}*` },
    ],
  });
}
