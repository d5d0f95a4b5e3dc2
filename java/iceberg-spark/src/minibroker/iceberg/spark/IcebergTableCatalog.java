package minibroker.iceberg.spark;

import java.util.Arrays;
import java.util.Map;
import org.apache.iceberg.CatalogUtil;
import org.apache.iceberg.MetadataTableType;
import org.apache.iceberg.MetadataTableUtils;
import org.apache.iceberg.catalog.Catalog;
import org.apache.iceberg.catalog.Namespace;
import org.apache.iceberg.catalog.TableIdentifier;
import org.apache.iceberg.spark.source.SparkTable;
import org.apache.spark.SparkContext;
import org.apache.spark.sql.catalyst.analysis.NoSuchTableException;
import org.apache.spark.sql.connector.catalog.CatalogV2Util;
import org.apache.spark.sql.connector.catalog.Column;
import org.apache.spark.sql.connector.catalog.Identifier;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCatalog;
import org.apache.spark.sql.connector.catalog.TableChange;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * A read-only Spark {@link TableCatalog} over any Iceberg catalog (JDBC, REST, ...), serving
 * Iceberg's own {@link SparkTable}: the reads are those of Iceberg's Spark runtime.
 *
 * <p>It stands in for Iceberg's {@code org.apache.iceberg.spark.SparkCatalog}, which cannot
 * load on Spark 4.3: Iceberg publishes runtimes up to Spark 4.1, whose {@code SparkCatalog}
 * implements {@code ViewCatalog} (Spark 4.3 refuses a catalog that implements both
 * {@code TableCatalog} and {@code ViewCatalog} instead of {@code RelationCatalog}) and whose
 * {@code SparkView} implements {@code View}, an interface up to Spark 4.1 and a class in 4.3
 * ({@code IncompatibleClassChangeError}). Its options are {@code SparkCatalog}'s catalog
 * options ({@code type}, {@code uri}, {@code warehouse}, {@code jdbc.*}, ...), handed to
 * Iceberg's {@code CatalogUtil.buildIcebergCatalog} as {@code SparkCatalog} hands them. Tables
 * are read only: creating, altering, dropping or renaming one is refused. Metadata tables
 * ({@code db.table.snapshots}, {@code .files}, ...) are served as {@code SparkCatalog} serves
 * them. No views, no namespaces listing, no time travel in SQL.
 */
public class IcebergTableCatalog implements TableCatalog {
  private String name;
  private Catalog catalog;

  @Override
  public void initialize(String name, CaseInsensitiveStringMap options) {
    this.name = name;
    this.catalog =
        CatalogUtil.buildIcebergCatalog(
            name, options.asCaseSensitiveMap(), SparkContext.getOrCreate().hadoopConfiguration());
  }

  @Override
  public String name() {
    return name;
  }

  @Override
  public Identifier[] listTables(String[] namespace) {
    return catalog.listTables(Namespace.of(namespace)).stream()
        .map(id -> Identifier.of(id.namespace().levels(), id.name()))
        .toArray(Identifier[]::new);
  }

  @Override
  public Table loadTable(Identifier ident) throws NoSuchTableException {
    Namespace namespace = Namespace.of(ident.namespace());
    try {
      return new Spark43Table(catalog.loadTable(TableIdentifier.of(namespace, ident.name())));
    } catch (org.apache.iceberg.exceptions.NoSuchTableException missing) {
      // <namespace>.<table>.<metadata table>, as SparkCatalog reads it.
      MetadataTableType type = MetadataTableType.from(ident.name());
      String[] levels = ident.namespace();
      if (type == null || levels.length < 2) {
        throw new NoSuchTableException(ident);
      }
      TableIdentifier base =
          TableIdentifier.of(
              Namespace.of(Arrays.copyOf(levels, levels.length - 1)), levels[levels.length - 1]);
      try {
        return new Spark43Table(
            MetadataTableUtils.createMetadataTableInstance(catalog.loadTable(base), type));
      } catch (org.apache.iceberg.exceptions.NoSuchTableException alsoMissing) {
        throw new NoSuchTableException(ident);
      }
    }
  }

  @Override
  public Table createTable(
      Identifier ident,
      org.apache.spark.sql.types.StructType schema,
      org.apache.spark.sql.connector.expressions.Transform[] partitions,
      Map<String, String> properties) {
    throw readOnly();
  }

  @Override
  public Table alterTable(Identifier ident, TableChange... changes) {
    throw readOnly();
  }

  @Override
  public boolean dropTable(Identifier ident) {
    throw readOnly();
  }

  @Override
  public void renameTable(Identifier oldIdent, Identifier newIdent) {
    throw readOnly();
  }

  private UnsupportedOperationException readOnly() {
    return new UnsupportedOperationException(
        name + " is a read-only catalog (minibroker.iceberg.spark.IcebergTableCatalog)");
  }

  /**
   * Iceberg's {@link SparkTable} with its columns made by Spark 4.3's {@code CatalogV2Util}
   * (the runtime calls {@code structTypeToV2Columns(StructType)}, which Spark 4.3 replaced by
   * {@code structTypeToV2Columns(StructType, boolean)}: {@code NoSuchMethodError}).
   */
  static final class Spark43Table extends SparkTable {
    Spark43Table(org.apache.iceberg.Table table) {
      super(table);
    }

    @Override
    public Column[] columns() {
      return CatalogV2Util.structTypeToV2Columns(
          schema(), CatalogV2Util.structTypeToV2Columns$default$2());
    }
  }
}
